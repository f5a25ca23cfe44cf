//! The client side of the topics benchmark (`run-topics.sh`): opens many
//! WebSocket connections to `topics_server`, has it publish, and times each
//! publish until the last connection received it.
//!
//! ```text
//! topics_load --addr ADDR [--control ADDR] [options]
//! topics_load table FILE          # the markdown table from the JSON lines
//!
//!   --subscribers N   connections, all subscribed to the one topic (default 10000)
//!   --messages K      publishes one at a time, and then K in one burst (default 50)
//!   --size S          bytes per message (default 1024)
//!   --deflate         offer permessage-deflate (and require it accepted)
//!   --sources M       local addresses 127.0.0.2 .. 127.0.0.(M+1) to connect
//!                     from, in turn (default 4)
//!   --label L         name of the run in the output (default "topics")
//! ```
//!
//! Like `loadgen`, it has no WebSocket library in it: plain Tokio TCP on a
//! current-thread runtime, the upgrade written by hand, server frames
//! parsed for their headers only (payloads skipped, compressed ones not
//! inflated), so that it costs as little as possible per delivery.
//!
//! Publishes reach each subscriber in the order they were made, so the
//! j-th message a connection receives is publish j: the client counts
//! messages per connection, and publish j is delivered when every
//! connection has received j + 1. No payload needs reading.
//!
//! Phases, after every connection is open and the server counts them all
//! subscribed, and one warm-up publish:
//!
//! - one at a time: K publishes, each asked for once the one before reached
//!   every connection; the time from the `publish` command to the last
//!   delivery, median and p99;
//! - burst: one `publish K` (K back to back on the server), the time from
//!   the command to the last delivery of the last one, and deliveries/s =
//!   K × N / that time.
//!
//! The server's CPU time (getrusage, through the control connection) is
//! read before and after each phase: server CPU per publish.
//!
//! Output: one flat JSON object per run, then a line starting with `#`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::Notify;

/// Connections opened at once, well under the server's listen backlog
/// (Tokio's 1 024).
const CONNECT_CONCURRENCY: usize = 128;
/// Each connection's read buffer: a burst leaves tens of KiB waiting per
/// socket, and bigger reads mean fewer calls.
const READ_BUF: usize = 16 << 10;
/// A phase that completes no publish for this long is stuck.
const STALL: Duration = Duration::from_secs(30);

struct Opts {
    addr: SocketAddr,
    control: SocketAddr,
    subscribers: usize,
    messages: usize,
    size: usize,
    deflate: bool,
    sources: u8,
    label: String,
}

fn parse_opts(args: &[String]) -> Result<Opts, String> {
    let (mut addr, mut control) = (None, None);
    let mut opts = Opts {
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        control: SocketAddr::from(([127, 0, 0, 1], 0)),
        subscribers: 10_000,
        messages: 50,
        size: 1024,
        deflate: false,
        sources: 4,
        label: "topics".into(),
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().cloned().ok_or(format!("{flag} needs a value"));
        let number = |v: String| v.parse::<usize>().map_err(|e| format!("{v}: {e}"));
        let sockaddr = |v: String| v.parse::<SocketAddr>().map_err(|e| format!("{v}: {e}"));
        match flag.as_str() {
            "--addr" => addr = Some(sockaddr(value()?)?),
            "--control" => control = Some(sockaddr(value()?)?),
            "--subscribers" => opts.subscribers = number(value()?)?.max(1),
            "--messages" => opts.messages = number(value()?)?.max(1),
            "--size" => opts.size = number(value()?)?,
            "--deflate" => opts.deflate = true,
            "--sources" => opts.sources = number(value()?)?.clamp(1, 200) as u8,
            "--label" => opts.label = value()?,
            other => return Err(format!("unknown option {other}")),
        }
    }
    opts.addr = addr.ok_or("--addr is required")?;
    opts.control = control.unwrap_or_else(|| SocketAddr::new(opts.addr.ip(), opts.addr.port() + 1));
    if !opts.addr.ip().is_loopback() || !opts.control.ip().is_loopback() {
        return Err("only loopback addresses are accepted".into());
    }
    Ok(opts)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("table") {
        return match args
            .get(1)
            .ok_or("table needs a file".to_owned())
            .and_then(|f| table(f))
        {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("topics_load: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let opts = match parse_opts(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("topics_load: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
        eprintln!("topics_load: could not raise the open-files limit: {e}");
    }
    // One thread, on the core the script leaves to the client: a second
    // thread would take CPU from the server.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    // Local tasks: the readers share one tally without locks.
    let local = tokio::task::LocalSet::new();
    match local.block_on(&rt, run(opts)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("topics_load: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Connects from `source`, performs the opening handshake (offering
/// permessage-deflate if asked) and returns the stream with the bytes the
/// server sent after its response.
async fn connect(
    addr: SocketAddr,
    source: IpAddr,
    deflate: bool,
) -> io::Result<(TcpStream, Vec<u8>)> {
    let socket = TcpSocket::new_v4()?;
    // Port 0 on one of several addresses: each brings a whole ephemeral
    // range, so 10 000 connections never search a nearly full one.
    socket.bind(SocketAddr::new(source, 0))?;
    let mut tcp = socket.connect(addr).await?;
    tcp.set_nodelay(true)?;
    // Closed with a reset, not a FIN, so that no TIME_WAIT socket holds
    // the port into the next run.
    tcp.set_zero_linger()?;
    let extensions = if deflate {
        // What browsers offer.
        "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
    } else {
        ""
    };
    let (text, early) = wavesock_benches::raw_handshake(&mut tcp, addr, extensions).await?;
    if deflate && !text.to_ascii_lowercase().contains("permessage-deflate") {
        return Err(io::Error::other(
            "the server did not accept permessage-deflate",
        ));
    }
    Ok((tcp, early))
}

/// Receipts of every connection, and when each publish reached them all.
struct Tally {
    connections: usize,
    /// Messages received per connection.
    counts: Vec<u32>,
    /// Per publish: connections that have it.
    reached: Vec<u32>,
    /// Per publish: when the first and the last connection got it.
    first_at: Vec<Option<Instant>>,
    done_at: Vec<Option<Instant>>,
    /// Data frames seen, with RSV1 (compressed) set, and their payload bytes.
    frames: u64,
    compressed: u64,
    payload_bytes: u64,
    /// Connections that ended (they should not, during a run).
    ended: usize,
    first_error: Option<String>,
    notify: Rc<Notify>,
}

impl Tally {
    fn message(&mut self, conn: usize) {
        let seq = self.counts[conn] as usize;
        self.counts[conn] += 1;
        if self.reached.len() <= seq {
            self.reached.resize(seq + 1, 0);
            self.first_at.resize(seq + 1, None);
            self.done_at.resize(seq + 1, None);
        }
        self.reached[seq] += 1;
        if self.reached[seq] == 1 {
            self.first_at[seq] = Some(Instant::now());
        }
        if self.reached[seq] as usize == self.connections {
            self.done_at[seq] = Some(Instant::now());
            self.notify.notify_one();
        }
    }
}

/// Reads one connection's frames for ever, counting messages.
async fn read_frames(conn: usize, mut rd: TcpStream, early: Vec<u8>, tally: Rc<RefCell<Tally>>) {
    let mut buf = vec![0u8; READ_BUF.max(early.len())];
    buf[..early.len()].copy_from_slice(&early);
    let (mut start, mut end) = (0, early.len());
    // Payload bytes of the current frame still to skip, and whether it
    // ends a data message (counted once its last byte is read).
    let mut skip = 0usize;
    let mut ends_message = false;
    let result: io::Result<()> = async {
        loop {
            // Complete what the buffer holds.
            loop {
                if skip > 0 {
                    let n = skip.min(end - start);
                    start += n;
                    skip -= n;
                    if skip > 0 {
                        break;
                    }
                }
                if ends_message {
                    ends_message = false;
                    tally.borrow_mut().message(conn);
                }
                let head = &buf[start..end];
                if head.len() < 2 {
                    break;
                }
                let (fin, rsv1, opcode) =
                    (head[0] & 0x80 != 0, head[0] & 0x40 != 0, head[0] & 0x0f);
                let (len_bytes, short) = match head[1] & 0x7f {
                    126 => (2, None),
                    127 => (8, None),
                    n => (0, Some(n as usize)),
                };
                if head[1] & 0x80 != 0 {
                    return Err(io::Error::other("a masked frame from the server"));
                }
                if head.len() < 2 + len_bytes {
                    break;
                }
                let len = short.unwrap_or_else(|| {
                    head[2..2 + len_bytes]
                        .iter()
                        .fold(0usize, |acc, &b| (acc << 8) | usize::from(b))
                });
                if opcode == 0x8 {
                    return Err(io::Error::other("the server sent a close frame"));
                }
                start += 2 + len_bytes;
                skip = len;
                if matches!(opcode, 0x0..=0x2) {
                    let mut t = tally.borrow_mut();
                    t.frames += 1;
                    t.compressed += u64::from(rsv1);
                    t.payload_bytes += len as u64;
                    ends_message = fin;
                }
            }
            // Only a partial header can be left: move it to the front.
            buf.copy_within(start..end, 0);
            end -= start;
            start = 0;
            let n = rd.read(&mut buf[end..]).await?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            end += n;
        }
    }
    .await;
    let mut t = tally.borrow_mut();
    t.ended += 1;
    if let Err(e) = result {
        t.first_error.get_or_insert_with(|| e.to_string());
    }
    t.notify.notify_one();
}

/// The server's control connection.
struct Control {
    lines: tokio::io::Lines<BufReader<OwnedReadHalf>>,
    wr: OwnedWriteHalf,
}

impl Control {
    async fn send(&mut self, command: &str) -> io::Result<()> {
        self.wr.write_all(format!("{command}\n").as_bytes()).await
    }

    async fn answer(&mut self) -> io::Result<String> {
        let line = tokio::time::timeout(STALL, self.lines.next_line())
            .await
            .map_err(|_| io::Error::other("the control connection is silent"))??
            .ok_or_else(|| io::Error::other("the control connection closed"))?;
        if line.starts_with("error") {
            return Err(io::Error::other(line));
        }
        Ok(line)
    }

    async fn ask(&mut self, command: &str) -> io::Result<Vec<u64>> {
        self.send(command).await?;
        let line = self.answer().await?;
        Ok(line
            .split_whitespace()
            .skip(1)
            .filter_map(|w| w.parse().ok())
            .collect())
    }

    /// The server's CPU time in nanoseconds: in all and in user space.
    async fn cpu_ns(&mut self) -> io::Result<Cpu> {
        let v = self.ask("cpu").await?;
        match v.as_slice() {
            [total, user] => Ok(Cpu {
                total: *total,
                user: *user,
            }),
            _ => Err(io::Error::other("a malformed cpu answer")),
        }
    }
}

/// A reading of the server's CPU time, in nanoseconds.
#[derive(Clone, Copy)]
struct Cpu {
    total: u64,
    /// In 10 ms steps (`/proc/PID/stat` ticks).
    user: u64,
}

impl Cpu {
    /// Milliseconds per publish (in all, in user space) from `self` to
    /// `later`.
    fn per_publish(self, later: Cpu, k: usize) -> (f64, f64) {
        let ms = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1e6 / k as f64;
        (ms(self.total, later.total), ms(self.user, later.user))
    }
}

/// Waits until publish `seq` has reached every connection; when it did.
async fn delivered(tally: &Rc<RefCell<Tally>>, seq: usize) -> io::Result<Instant> {
    let notify = tally.borrow().notify.clone();
    loop {
        {
            let t = tally.borrow();
            if let Some(Some(at)) = t.done_at.get(seq) {
                return Ok(*at);
            }
            if t.ended > 0 {
                return Err(io::Error::other(format!(
                    "{} connections ended, first: {}",
                    t.ended,
                    t.first_error.as_deref().unwrap_or("end of stream")
                )));
            }
        }
        if tokio::time::timeout(STALL, notify.notified())
            .await
            .is_err()
        {
            let t = tally.borrow();
            let have = t.reached.get(seq).copied().unwrap_or(0);
            return Err(io::Error::other(format!(
                "publish {seq} reached {have} of {} connections in {STALL:?}",
                t.connections
            )));
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn run(opts: Opts) -> io::Result<()> {
    let n = opts.subscribers;
    let started = Instant::now();
    let conns: Vec<io::Result<(TcpStream, Vec<u8>)>> = futures_util::stream::iter(0..n)
        .map(|i| {
            let source = IpAddr::V4(Ipv4Addr::new(
                127,
                0,
                0,
                2 + (i % usize::from(opts.sources)) as u8,
            ));
            connect(opts.addr, source, opts.deflate)
        })
        .buffered(CONNECT_CONCURRENCY)
        .collect()
        .await;
    let failed = conns.iter().filter(|c| c.is_err()).count();
    if let Some(Err(e)) = conns.iter().find(|c| c.is_err()) {
        return Err(io::Error::other(format!(
            "{failed} of {n} connections failed, first: {e}"
        )));
    }
    let connect_secs = started.elapsed().as_secs_f64();
    let tally = Rc::new(RefCell::new(Tally {
        connections: n,
        counts: vec![0; n],
        reached: Vec::new(),
        first_at: Vec::new(),
        done_at: Vec::new(),
        frames: 0,
        compressed: 0,
        payload_bytes: 0,
        ended: 0,
        first_error: None,
        notify: Rc::new(Notify::new()),
    }));
    for (i, c) in conns.into_iter().enumerate() {
        let (tcp, early) = c?;
        tokio::task::spawn_local(read_frames(i, tcp, early, tally.clone()));
    }

    let tcp = TcpStream::connect(opts.control).await?;
    tcp.set_nodelay(true)?;
    let (rd, wr) = tcp.into_split();
    let mut control = Control {
        lines: BufReader::new(rd).lines(),
        wr,
    };
    // The hub subscribes a connection when it opens it, the stream tasks
    // once their handshake is done: wait until the server counts them all.
    let deadline = Instant::now() + STALL;
    loop {
        let subs = control
            .ask("subscribers")
            .await?
            .first()
            .copied()
            .unwrap_or(0);
        if subs as usize >= n {
            break;
        }
        if Instant::now() > deadline {
            return Err(io::Error::other(format!("only {subs} of {n} subscribed")));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let size = opts.size;
    let mut seq = 0;
    // Warm-up: the first publish allocates what later ones reuse (write
    // buffers, the broadcast ring, socket buffers growing).
    for _ in 0..3 {
        control.send(&format!("publish 1 {size}")).await?;
        delivered(&tally, seq).await?;
        control.answer().await?;
        seq += 1;
    }

    let k = opts.messages;
    let cpu0 = control.cpu_ns().await?;
    let mut times = Vec::with_capacity(k);
    let mut firsts = Vec::with_capacity(k);
    for _ in 0..k {
        let sent = Instant::now();
        control.send(&format!("publish 1 {size}")).await?;
        let at = delivered(&tally, seq).await?;
        times.push(at - sent);
        // Set whenever the last one is.
        let first = tally.borrow().first_at[seq].unwrap_or(at);
        firsts.push(first - sent);
        control.answer().await?;
        seq += 1;
    }
    let cpu1 = control.cpu_ns().await?;
    times.sort();
    firsts.sort();
    let (p50, p99) = (percentile(&times, 0.5), percentile(&times, 0.99));
    // When the first connection had it: how long the server took before
    // its first write (a hub encodes for every subscriber before writing).
    let first_p50 = percentile(&firsts, 0.5);
    let (single_cpu_ms, single_user_ms) = cpu0.per_publish(cpu1, k);

    let sent = Instant::now();
    control.send(&format!("publish {k} {size}")).await?;
    let at = delivered(&tally, seq + k - 1).await?;
    let burst_secs = (at - sent).as_secs_f64();
    control.answer().await?;
    let cpu2 = control.cpu_ns().await?;
    let (burst_cpu_ms, burst_user_ms) = cpu1.per_publish(cpu2, k);
    let deliveries_per_s = (k * n) as f64 / burst_secs;

    let t = tally.borrow();
    let wire_bytes = t.payload_bytes as f64 / t.frames.max(1) as f64;
    let compressed = t.compressed as f64 / t.frames.max(1) as f64;
    println!(
        "{{\"label\":\"{}\",\"subscribers\":{n},\"messages\":{k},\"size\":{size},\"deflate\":{},\
         \"single_p50_us\":{},\"single_p99_us\":{},\"single_first_p50_us\":{},\"single_cpu_ms\":{single_cpu_ms:.3},\
         \"single_user_ms\":{single_user_ms:.3},\
         \"burst_ms\":{:.1},\"burst_deliveries_per_s\":{deliveries_per_s:.0},\"burst_cpu_ms\":{burst_cpu_ms:.3},\
         \"burst_user_ms\":{burst_user_ms:.3},\
         \"payload_bytes\":{wire_bytes:.0},\"compressed_fraction\":{compressed:.3},\"connect_s\":{connect_secs:.1}}}",
        opts.label,
        opts.deflate,
        p50.as_micros(),
        p99.as_micros(),
        first_p50.as_micros(),
        burst_secs * 1e3,
    );
    println!(
        "# {}: one at a time p50 {:.2} ms p99 {:.2} ms, {single_cpu_ms:.2} ms server CPU/publish; \
         burst of {k}: {:.0} ms, {:.2} M deliveries/s, {burst_cpu_ms:.2} ms CPU/publish; \
         {wire_bytes:.0} B payload on the wire, {:.0} % compressed",
        opts.label,
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        burst_secs * 1e3,
        deliveries_per_s / 1e6,
        compressed * 100.0
    );
    // Exiting closes every connection with a reset (zero linger).
    std::process::exit(0);
}

/// A flat JSON object's fields, as strings (the only JSON this reads is
/// its own output).
fn parse_flat_json(line: &str) -> Option<HashMap<String, String>> {
    let body = line.trim().strip_prefix('{')?.strip_suffix('}')?;
    Some(
        body.split(',')
            .filter_map(|kv| {
                let (k, v) = kv.split_once(':')?;
                Some((
                    k.trim_matches('"').to_owned(),
                    v.trim_matches('"').to_owned(),
                ))
            })
            .collect(),
    )
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// The markdown table: for plain and deflate, each figure's median over
/// the rounds per mode, and the hub's ratio to each other mode. Labels are
/// `MODE` or `MODE-deflate`; medians, not bests, since the machine's noise
/// goes both ways for latency (a publish can also land in a quiet moment).
/// A row of the table: its name, the JSON field, how to show its value.
type Row<'a> = (&'a str, &'a str, &'a dyn Fn(f64) -> String);

fn table(file: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
    let runs: Vec<HashMap<String, String>> = text.lines().filter_map(parse_flat_json).collect();
    let modes: Vec<String> = {
        let mut m = Vec::new();
        for r in &runs {
            let label = r.get("label").cloned().unwrap_or_default();
            let mode = label.strip_suffix("-deflate").unwrap_or(&label).to_owned();
            if !m.contains(&mode) {
                m.push(mode);
            }
        }
        m
    };
    let others: Vec<&String> = modes.iter().filter(|m| *m != "hub").collect();
    let figure = |label: &str, key: &str| -> Option<f64> {
        median(
            runs.iter()
                .filter(|r| r.get("label").map(String::as_str) == Some(label))
                .filter_map(|r| r.get(key)?.parse().ok())
                .collect(),
        )
    };
    let rounds = |label: &str| {
        runs.iter()
            .filter(|r| r.get("label").map(String::as_str) == Some(label))
            .count()
    };
    let mut head = String::from("| | figure |");
    let mut rule = String::from("| --- | --- |");
    for m in &modes {
        head.push_str(&format!(" {m} |"));
        rule.push_str(" --- |");
    }
    for o in &others {
        head.push_str(&format!(" hub ÷ {o} |"));
        rule.push_str(" --- |");
    }
    println!("{head}\n{rule}");
    let ms = |v: f64| format!("{v:.1} ms");
    let rows: [Row; 10] = [
        (
            "time to last delivery, one at a time, median",
            "single_p50_us",
            &|v| ms(v / 1e3),
        ),
        (
            "time to last delivery, one at a time, p99",
            "single_p99_us",
            &|v| ms(v / 1e3),
        ),
        (
            "time to first delivery, one at a time, median",
            "single_first_p50_us",
            &|v| ms(v / 1e3),
        ),
        (
            "server CPU per publish, one at a time",
            "single_cpu_ms",
            &ms,
        ),
        ("… of which user space", "single_user_ms", &ms),
        ("burst: deliveries/s", "burst_deliveries_per_s", &|v| {
            format!("{:.3} M", v / 1e6)
        }),
        ("burst: server CPU per publish", "burst_cpu_ms", &ms),
        ("… of which user space", "burst_user_ms", &ms),
        ("server peak RSS (VmHWM)", "server_hwm_kib", &|v| {
            format!("{:.0} MiB", v / 1024.0)
        }),
        (
            "payload bytes per message on the wire",
            "payload_bytes",
            &|v| format!("{v:.0}"),
        ),
    ];
    for suffix in ["", "-deflate"] {
        if !modes.iter().any(|m| rounds(&format!("{m}{suffix}")) > 0) {
            continue;
        }
        let name = if suffix.is_empty() {
            "plain"
        } else {
            "deflate"
        };
        for (what, key, fmt) in &rows {
            let mut row = format!("| {name} | {what} |");
            let hub = figure(&format!("hub{suffix}"), key);
            for m in &modes {
                match figure(&format!("{m}{suffix}"), key) {
                    Some(v) => row.push_str(&format!(" {} |", fmt(v))),
                    None => row.push_str(" — |"),
                }
            }
            for o in &others {
                match (hub, figure(&format!("{o}{suffix}"), key)) {
                    (Some(h), Some(v)) if v > 0.0 => row.push_str(&format!(" {:.2} |", h / v)),
                    _ => row.push_str(" — |"),
                }
            }
            println!("{row}");
        }
    }
    let counts: Vec<String> = modes
        .iter()
        .flat_map(|m| [m.clone(), format!("{m}-deflate")])
        .filter(|l| rounds(l) > 0)
        .map(|l| format!("{l} {}", rounds(&l)))
        .collect();
    println!("\nRounds per configuration: {}.", counts.join(", "));
    Ok(())
}
