//! Runs a client plan over a real loopback socket and records what comes
//! back: the HTTP answer, each server frame, how the connection ended and
//! when.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio::sync::Notify;

use super::plan::{Action, Plan, Want};
use super::reference::{TAIL, inflate};

/// How long a wait on the server may take before it counts as a hang:
/// the end after the client's own, a sync point, a write.
pub const BOUND: Duration = Duration::from_secs(10);

/// A frame the server sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Got {
    pub fin: bool,
    pub rsv: u8,
    pub opcode: u8,
    pub masked: bool,
    pub payload: Vec<u8>,
}

/// How reading ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadEnd {
    /// Still reading (a transcript looked at mid-way).
    Open,
    /// FIN from the server.
    Eof,
    /// The connection was reset (or failed otherwise): its error kind.
    Error(std::io::ErrorKind),
    /// The client reset it itself: reading stopped there.
    Stopped,
    /// The server never let go within the bound after the client's end.
    Hung,
    /// Bytes that are no frame.
    Garbage(String),
}

#[derive(Debug, Clone)]
pub struct Transcript {
    /// The HTTP answer's head as read (all of it, if it never finished).
    pub head: Vec<u8>,
    pub status: Option<u16>,
    /// Frames, a compressed message's payload inflated (its RSV1 kept).
    pub frames: Vec<Got>,
    /// The answer's `Sec-WebSocket-Extensions`, if any.
    pub extensions: Option<String>,
    pub end: ReadEnd,
    /// What went wrong on the client's side of things: a sync point whose
    /// frames never came, a write the server never took.
    pub problems: Vec<String>,
    /// The client's last action (close frame, FIN, reset) to the server
    /// letting go, for the report.
    pub end_after: Option<Duration>,
    /// Writes failed (the server had gone): from which action on.
    pub write_failed: Option<(usize, std::io::ErrorKind)>,
}

impl Transcript {
    fn new() -> Self {
        Transcript {
            head: Vec::new(),
            status: None,
            frames: Vec::new(),
            extensions: None,
            end: ReadEnd::Open,
            problems: Vec::new(),
            end_after: None,
            write_failed: None,
        }
    }

    pub fn echoes(&self) -> impl Iterator<Item = &Got> {
        self.frames.iter().filter(|f| matches!(f.opcode, 1 | 2))
    }

    pub fn closed(&self) -> bool {
        self.frames.iter().any(|f| f.opcode == 8)
    }

    fn has(&self, want: &Want, split: bool) -> bool {
        let echoes_needed = if want.done && split { 0 } else { want.echoes };
        self.echoes().count() >= echoes_needed
            && want.pong.as_ref().is_none_or(|p| {
                self.frames
                    .iter()
                    .any(|f| f.opcode == 10 && &f.payload == p)
            })
            && (!want.close || self.closed())
    }
}

struct Shared {
    transcript: Mutex<Transcript>,
    /// Reading resumes at this instant.
    paused: Mutex<Option<Instant>>,
    changed: Notify,
    resume: Notify,
}

/// Reads and parses until the end, into `shared`.
async fn reader(tcp: Arc<TcpStream>, shared: Arc<Shared>, read_size: usize) {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; if read_size == 0 { 64 << 10 } else { read_size }];
    let mut upgraded = false;
    let mut head_done = false;
    // The client's inflater once the server took permessage-deflate, and
    // whether the server keeps its context (else reset each message).
    let mut inflater: Option<(flate2::Decompress, bool)> = None;
    loop {
        loop {
            let until = *shared.paused.lock().unwrap();
            match until {
                Some(t) if t > Instant::now() => {
                    let _ = tokio::time::timeout_at(t.into(), shared.resume.notified()).await;
                }
                _ => break,
            }
        }
        if let Err(e) = tcp.readable().await {
            shared.transcript.lock().unwrap().end = ReadEnd::Error(e.kind());
            shared.changed.notify_waiters();
            return;
        }
        let n = match tcp.try_read(&mut chunk) {
            Ok(0) => {
                let mut t = shared.transcript.lock().unwrap();
                if !head_done {
                    t.head = buf.clone();
                } else if upgraded && !buf.is_empty() {
                    t.end = ReadEnd::Garbage(format!("{} bytes of a frame, then EOF", buf.len()));
                    drop(t);
                    shared.changed.notify_waiters();
                    return;
                }
                t.end = ReadEnd::Eof;
                drop(t);
                shared.changed.notify_waiters();
                return;
            }
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => {
                let mut t = shared.transcript.lock().unwrap();
                if !head_done {
                    t.head = buf.clone();
                }
                t.end = ReadEnd::Error(e.kind());
                drop(t);
                shared.changed.notify_waiters();
                return;
            }
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut t = shared.transcript.lock().unwrap();
        if !head_done {
            let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            head_done = true;
            t.head = buf[..i + 4].to_vec();
            t.status = std::str::from_utf8(&t.head)
                .ok()
                .and_then(|h| h.strip_prefix("HTTP/1.1 "))
                .and_then(|h| h.get(..3))
                .and_then(|s| s.parse().ok());
            upgraded = t.status == Some(101);
            t.extensions = std::str::from_utf8(&t.head).ok().and_then(|h| {
                h.split("\r\n").find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("sec-websocket-extensions")
                        .then(|| value.trim().to_owned())
                })
            });
            if let Some(e) = &t.extensions {
                if e.contains("permessage-deflate") {
                    let takeover = !e.contains("server_no_context_takeover");
                    inflater = Some((flate2::Decompress::new(false), takeover));
                }
            }
            buf.drain(..i + 4);
        }
        if !upgraded {
            // A refusal's body: not looked at.
            buf.clear();
            continue;
        }
        loop {
            match parse(&buf) {
                Ok(Some((mut frame, used))) => {
                    buf.drain(..used);
                    if frame.rsv == 4 && matches!(frame.opcode, 1 | 2) && frame.fin {
                        if let Some((d, takeover)) = &mut inflater {
                            if !*takeover {
                                d.reset(false);
                            }
                            let mut out = Vec::new();
                            let ok = inflate(d, &frame.payload, &mut out, 64 << 20)
                                .and_then(|()| inflate(d, &TAIL, &mut out, 64 << 20));
                            if ok.is_err() {
                                t.end = ReadEnd::Garbage(
                                    "a compressed message that does not inflate".into(),
                                );
                                drop(t);
                                shared.changed.notify_waiters();
                                return;
                            }
                            frame.payload = out;
                        }
                    }
                    t.frames.push(frame);
                }
                Ok(None) => break,
                Err(e) => {
                    t.end = ReadEnd::Garbage(e);
                    drop(t);
                    shared.changed.notify_waiters();
                    return;
                }
            }
        }
        drop(t);
        shared.changed.notify_waiters();
    }
}

/// One server frame off the front of `buf`, and its length; `None` if it
/// is not all there yet.
fn parse(buf: &[u8]) -> Result<Option<(Got, usize)>, String> {
    if buf.len() < 2 {
        return Ok(None);
    }
    let masked = buf[1] & 0x80 != 0;
    let (len, mut at) = match buf[1] & 0x7f {
        126 if buf.len() >= 4 => (u64::from(u16::from_be_bytes([buf[2], buf[3]])), 4),
        127 if buf.len() >= 10 => (u64::from_be_bytes(buf[2..10].try_into().unwrap()), 10),
        126 | 127 => return Ok(None),
        n => (u64::from(n), 2),
    };
    if len > 64 << 20 {
        return Err(format!("a frame of {len} bytes"));
    }
    let len = len as usize;
    let key = if masked {
        if buf.len() < at + 4 {
            return Ok(None);
        }
        at += 4;
        Some(&buf[at - 4..at])
    } else {
        None
    };
    if buf.len() < at + len {
        return Ok(None);
    }
    let mut payload = buf[at..at + len].to_vec();
    if let Some(k) = key {
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= k[i % 4];
        }
    }
    Ok(Some((
        Got {
            fin: buf[0] & 0x80 != 0,
            rsv: (buf[0] >> 4) & 7,
            opcode: buf[0] & 0xf,
            masked,
            payload,
        },
        at + len,
    )))
}

async fn write_all(tcp: &TcpStream, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        tcp.writable().await?;
        match tcp.try_write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes `bytes` in the pieces `cuts` make, `pause` apart; bounded.
async fn write_pieces(
    tcp: &TcpStream,
    bytes: &[u8],
    cuts: &[usize],
    pause: Duration,
) -> Result<(), std::io::Error> {
    let mut from = 0;
    for &to in cuts.iter().chain(std::iter::once(&bytes.len())) {
        if to <= from {
            continue;
        }
        let piece = &bytes[from..to];
        match tokio::time::timeout(BOUND, write_all(tcp, piece)).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("the server took no bytes for {BOUND:?}"),
                ));
            }
        }
        from = to;
        if to < bytes.len() && !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
    }
    Ok(())
}

impl Shared {
    async fn wait(&self, mut f: impl FnMut(&Transcript) -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + BOUND;
        loop {
            let changed = self.changed.notified();
            {
                let t = self.transcript.lock().unwrap();
                if f(&t) || t.end != ReadEnd::Open {
                    return f(&t);
                }
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return false;
            }
        }
    }

    fn resume(&self) {
        *self.paused.lock().unwrap() = None;
        self.resume.notify_waiters();
    }
}

/// Runs `plan` against the server at `addr`. `split` only changes what a
/// sync point waits for (see [`Want::done`]).
pub async fn run(addr: SocketAddr, plan: &Plan, split: bool) -> Transcript {
    let tcp = match TcpStream::connect(addr).await {
        Ok(t) => Arc::new(t),
        Err(e) => {
            let mut t = Transcript::new();
            t.problems.push(format!("connect: {e}"));
            return t;
        }
    };
    tcp.set_nodelay(true).unwrap();
    let shared = Arc::new(Shared {
        transcript: Mutex::new(Transcript::new()),
        paused: Mutex::new(None),
        changed: Notify::new(),
        resume: Notify::new(),
    });
    let reading = tokio::spawn(reader(tcp.clone(), shared.clone(), plan.read_size));
    let mut dead = write_pieces(&tcp, &plan.request, &plan.request_cuts, plan.request_pause)
        .await
        .err()
        .map(|e| (0, e.kind()));
    if plan.wait_upgrade && dead.is_none() {
        let upgraded = shared.wait(|t| t.status.is_some()).await;
        if !upgraded {
            shared
                .transcript
                .lock()
                .unwrap()
                .problems
                .push("no answer to the upgrade request".into());
        }
    }
    let mut ended_at = None;
    for (i, action) in plan.actions.iter().enumerate() {
        let problem =
            |shared: &Shared, p: String| shared.transcript.lock().unwrap().problems.push(p);
        match action {
            Action::Write { bytes, cuts, pause } => {
                if dead.is_none() {
                    if let Err(e) = write_pieces(&tcp, bytes, cuts, *pause).await {
                        if e.kind() == std::io::ErrorKind::TimedOut {
                            problem(&shared, format!("action {i}: {e}"));
                        }
                        dead = Some((i, e.kind()));
                    }
                }
            }
            Action::Sync(want) => {
                shared.resume();
                if !shared.wait(|t| t.has(want, split)).await {
                    problem(&shared, format!("action {i}: sync never saw {want:?}"));
                }
            }
            Action::StopReading(d) => {
                *shared.paused.lock().unwrap() = Some(Instant::now() + *d);
            }
            Action::Pause(d) => tokio::time::sleep(*d).await,
            Action::Close(bytes) | Action::Cut(bytes) => {
                if dead.is_none() {
                    if let Err(e) = write_pieces(&tcp, bytes, &[], Duration::ZERO).await {
                        dead = Some((i, e.kind()));
                    }
                }
                if matches!(action, Action::Cut(_)) {
                    let _ = socket2::SockRef::from(&*tcp).shutdown(std::net::Shutdown::Write);
                }
                ended_at = Some(Instant::now());
            }
            Action::Fin => {
                let _ = socket2::SockRef::from(&*tcp).shutdown(std::net::Shutdown::Write);
                ended_at = Some(Instant::now());
            }
            Action::Answer(bytes) => {
                shared.resume();
                if !shared.wait(|t| t.closed()).await {
                    problem(
                        &shared,
                        format!("action {i}: the server's close never came"),
                    );
                }
                if dead.is_none() {
                    if let Err(e) = write_pieces(&tcp, bytes, &[], Duration::ZERO).await {
                        dead = Some((i, e.kind()));
                    }
                }
                ended_at = Some(Instant::now());
            }
            Action::Read => ended_at = Some(Instant::now()),
            Action::Rst(bytes) => {
                if dead.is_none() && !bytes.is_empty() {
                    if let Err(e) = write_pieces(&tcp, bytes, &[], Duration::ZERO).await {
                        dead = Some((i, e.kind()));
                    }
                }
                let _ = tcp.set_zero_linger();
                reading.abort();
                let _ = reading.await;
                drop(tcp);
                let mut t = shared.transcript.lock().unwrap().clone();
                t.end = ReadEnd::Stopped;
                t.write_failed = dead;
                return t;
            }
        }
    }
    // Read to the end: the server must let go of the socket.
    shared.resume();
    let ended_at = ended_at.unwrap_or_else(Instant::now);
    let mut reading = reading;
    let finished = tokio::time::timeout(BOUND, &mut reading).await.is_ok();
    if !finished {
        reading.abort();
    }
    let mut t = shared.transcript.lock().unwrap().clone();
    t.write_failed = dead;
    if finished {
        t.end_after = Some(ended_at.elapsed());
    } else {
        t.end = ReadEnd::Hung;
    }
    t
}
