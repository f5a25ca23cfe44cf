//! A hub connection has three parties besides its engine: the peer writing
//! frames and reading replies, the handler answering on the engine's task,
//! and other tasks sending and closing through a [`HubHandle`]'s bounded
//! queue. Their order is the scheduler's and the network's. This explores
//! it systematically, as `tests/protocol/interleavings.rs` does for the split
//! halves: every schedule of `DEPTH` steps, each step polling the engine
//! once (woken or not), letting the peer write its next chunk (frames cut
//! so that one straddles reads), letting the peer read what the server
//! wrote, or letting the handle's task make its next move (a `try_send`,
//! or a `close` it awaits), followed by a fair drain in which the engine
//! is polled only when woken, as an executor would. Whatever the schedule:
//! - the server's bytes are whole unmasked frames, never torn or
//!   interleaved; exactly one close frame, then nothing but the end;
//! - the handler sees the peer's data messages and pings in order until
//!   the server's close is asked for (all of them if the peer closes
//!   first), and none after: the hub reads on after its own close, for
//!   the peer's answer, but hands nothing more to the handler;
//! - the echoes the handler was told were sent are on the wire, in order,
//!   and no others;
//! - the handle's messages that were queued are on the wire in order,
//!   never twice: all of those the engine took before anything closed,
//!   none queued after the handle's close;
//! - every ping that came before the hub's close frame went out gets its
//!   pong, in order (those the handler saw among them), and all of them
//!   when the peer closed first;
//! - `Handler::close` is called once, with the peer's close frame (the
//!   peer's own, or its echo of the handle's close) and no error;
//! - the engine comes to rest when nothing happens (no busy loop, no lost
//!   wake-up), and a shutdown then stops it at once.
//!
//! A step that changes nothing (a write the full pipe refuses, a read with
//! nothing to read, the handle's task still waiting) ends its branch: every
//! schedule through it ends where the one without it does, which is run.
//! Engine polls always count. That leaves a few thousand schedules per
//! scenario at the default depth instead of 4^7, and the same states.
//!
//! The connection is handed over with [`Adopter::adopt`] on a small
//! `tokio::io::duplex`, so that the server's writes fill it and the
//! hub's write-blocked path (reading pauses) runs. Nothing is spawned and
//! no time passes: every party is polled by hand, and each schedule is
//! deterministic.
//!
//! `INTERLEAVE_DEPTH=N` explores deeper (default 7, about a second in the
//! dev profile; 9 takes some 15 s, 10 some 40 s).
//!
//! [`Adopter::adopt`]: wavesock::hub::Adopter::adopt

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};
use wavesock::http::{Request, Response};
use wavesock::hub::HttpResponse;
use wavesock::hub::{
    Closed, ConnId, HandleError, Handler, Hub, HubHandle, HubMessage, SendStatus, Ws,
};
use wavesock::{CloseCode, CloseFrame, Config, Message};

use crate::support::interleave;

use interleave::{AsPayload, client_frame, depth, paused_runtime};

type BoxFut<T> = Pin<Box<dyn Future<Output = T>>>;

/// The duplex's capacity each way: a couple of the server's messages fill
/// it, so its writes wait for the peer to read.
const PIPE: usize = 64;
/// Bytes the peer writes per step: not a divisor of the frames' sizes, so
/// frames straddle the hub's reads.
const CHUNK: usize = 11;
/// Commands the handle's queue holds: small, so `try_send` meets `Full`
/// and `close` waits for room.
const QUEUE: usize = 2;
/// Polls the engine may take, woken by nothing but itself, before it must
/// come to rest: a connection requeued to let others go first, then
/// ending, takes a few.
const SPINS: usize = 4;
/// Rounds of the fair drain before a schedule counts as stuck.
const ROUNDS: usize = 200;

/// The opcode and payload of a frame made by [`client_frame`].
fn unmask(frame: &[u8]) -> (u8, Vec<u8>) {
    let key = &frame[2..6];
    let payload = frame[6..]
        .iter()
        .enumerate()
        .map(|(i, b)| b ^ key[i % 4])
        .collect();
    (frame[0] & 0x0F, payload)
}

fn close_payload(code: u16, reason: &str) -> Vec<u8> {
    let mut p = code.to_be_bytes().to_vec();
    p.extend_from_slice(reason.as_bytes());
    p
}

/// A text or binary message from an opcode and payload.
fn data_message(opcode: u8, payload: &[u8]) -> Message {
    match opcode {
        1 => Message::text(String::from_utf8(payload.to_vec()).unwrap()),
        2 => Message::binary(payload.to_vec()),
        op => panic!("opcode {op} is not data"),
    }
}

/// A server frame as the peer reads it.
#[derive(Debug, Clone, PartialEq)]
struct Wire {
    fin: bool,
    rsv: u8,
    masked: bool,
    opcode: u8,
    payload: Vec<u8>,
}

/// Splits bytes into whole frames, and how many bytes are left over (an
/// unfinished frame).
fn split(mut bytes: &[u8]) -> (Vec<Wire>, usize) {
    let mut frames = Vec::new();
    loop {
        if bytes.len() < 2 {
            return (frames, bytes.len());
        }
        let (len, mut head): (usize, usize) = match bytes[1] & 0x7F {
            126 if bytes.len() >= 4 => (u16::from_be_bytes([bytes[2], bytes[3]]) as usize, 4),
            127 if bytes.len() >= 10 => {
                let mut n = [0; 8];
                n.copy_from_slice(&bytes[2..10]);
                (u64::from_be_bytes(n) as usize, 10)
            }
            126 | 127 => return (frames, bytes.len()),
            n => (n as usize, 2),
        };
        let masked = bytes[1] & 0x80 != 0;
        if masked {
            head += 4;
        }
        if bytes.len() < head.saturating_add(len) {
            return (frames, bytes.len());
        }
        frames.push(Wire {
            fin: bytes[0] & 0x80 != 0,
            rsv: bytes[0] & 0x70,
            masked,
            opcode: bytes[0] & 0x0F,
            payload: bytes[head..head + len].to_vec(),
        });
        bytes = &bytes[head + len..];
    }
}

/// A handler call, as recorded.
#[derive(Debug)]
enum Call {
    Open(ConnId),
    /// A data message, and what became of its echo.
    Message(Message, SendStatus),
    /// A ping's payload, and whether the connection was closing then (its
    /// pong is owed only if not).
    Ping(Vec<u8>, bool),
    Pong,
    Drain,
    Close(Closed),
}

/// Echoes every data message and records every call.
#[derive(Clone, Default)]
struct Recorder {
    calls: Arc<Mutex<Vec<Call>>>,
}

fn lock(calls: &Mutex<Vec<Call>>) -> MutexGuard<'_, Vec<Call>> {
    calls.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Handler for Recorder {
    type Data = ();

    fn upgrade(&mut self, _: &Request<()>, _: &mut Response<()>) -> Result<(), HttpResponse> {
        unreachable!("an adopted connection was upgraded elsewhere")
    }

    fn open(&mut self, ws: &mut Ws<'_, ()>) {
        lock(&self.calls).push(Call::Open(ws.id()));
    }

    fn message(&mut self, ws: &mut Ws<'_, ()>, msg: HubMessage<'_>) {
        // Both ways of sending: borrowed text, an owned message.
        let (owned, status) = match msg {
            HubMessage::Text(t) => (Message::text(t.to_owned()), ws.send_text(t)),
            HubMessage::Binary(b) => {
                let m = Message::binary(b.to_vec());
                let status = ws.send(&m);
                (m, status)
            }
        };
        let status = status.expect("an echo is a valid send");
        lock(&self.calls).push(Call::Message(owned, status));
    }

    fn ping(&mut self, ws: &mut Ws<'_, ()>, payload: &[u8]) {
        let closing = ws.is_closing();
        lock(&self.calls).push(Call::Ping(payload.to_vec(), closing));
    }

    fn pong(&mut self, _: &mut Ws<'_, ()>, _: &[u8]) {
        lock(&self.calls).push(Call::Pong);
    }

    fn drain(&mut self, _: &mut Ws<'_, ()>) {
        lock(&self.calls).push(Call::Drain);
    }

    fn close(&mut self, closed: Closed, _: ()) {
        lock(&self.calls).push(Call::Close(closed));
    }
}

/// What the peer does: write its script a chunk at a time, read what the
/// server sends. Once it reads the server's close frame it finishes the
/// frame it is writing and answers with the same close, unless it has
/// started its own already (a well-behaved client).
struct Peer {
    io: DuplexStream,
    frames: Vec<Vec<u8>>,
    script: Vec<u8>,
    written: usize,
    read: Vec<u8>,
    eof: bool,
    write_failed: bool,
    answered: bool,
    /// The clock when its close frame was all written.
    close_written: Option<usize>,
}

impl Peer {
    fn new(io: DuplexStream, frames: Vec<Vec<u8>>) -> Self {
        Peer {
            io,
            script: frames.concat(),
            frames,
            written: 0,
            read: Vec::new(),
            eof: false,
            write_failed: false,
            answered: false,
            close_written: None,
        }
    }

    /// Whether it wrote anything.
    fn write(&mut self, cx: &mut Context<'_>, clock: usize) -> bool {
        if self.written == self.script.len() || self.write_failed {
            return false;
        }
        let end = self.script.len().min(self.written + CHUNK);
        match Pin::new(&mut self.io).poll_write(cx, &self.script[self.written..end]) {
            Poll::Ready(Ok(n)) => self.written += n,
            Poll::Ready(Err(_)) => self.write_failed = true,
            Poll::Pending => return false,
        }
        if self.close_written.is_none() && self.close_end().is_some_and(|e| e <= self.written) {
            self.close_written = Some(clock);
        }
        true
    }

    /// Whether it read anything, or the end.
    fn read(&mut self, cx: &mut Context<'_>) -> bool {
        let (before, eof) = (self.read.len(), self.eof);
        while !self.eof {
            let mut buf = [0u8; PIPE];
            let mut rb = ReadBuf::new(&mut buf);
            match Pin::new(&mut self.io).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) if rb.filled().is_empty() => self.eof = true,
                Poll::Ready(Ok(())) => self.read.extend_from_slice(rb.filled()),
                Poll::Ready(Err(_)) => self.eof = true,
                Poll::Pending => break,
            }
        }
        if !self.answered {
            let (frames, _) = split(&self.read);
            if let Some(close) = frames.iter().find(|f| f.opcode == 8) {
                self.answer(&close.payload.clone());
            }
        }
        self.read.len() > before || self.eof != eof
    }

    /// The server's close frame came: drop what is not started yet, and
    /// echo it unless a close of ours is under way.
    fn answer(&mut self, payload: &[u8]) {
        self.answered = true;
        let mut start = 0;
        let mut keep = 0;
        for f in &self.frames {
            if start >= self.written {
                break;
            }
            start += f.len();
            keep += 1;
        }
        self.frames.truncate(keep);
        if !self.frames.iter().any(|f| f[0] & 0x0F == 8) {
            self.frames.push(client_frame(8, payload));
        }
        self.script = self.frames.concat();
    }

    /// Where its close frame ends in its script.
    fn close_end(&self) -> Option<usize> {
        let at = self.frames.iter().position(|f| f[0] & 0x0F == 8)?;
        Some(self.frames[..=at].iter().map(Vec::len).sum())
    }
}

/// What the handle's task does, in order.
#[derive(Debug, Clone)]
enum Act {
    /// `try_send`: a full queue refuses it and the task goes on.
    Send(Message),
    /// `close(...).await`: the task waits for room in the queue.
    Close(u16, &'static str),
}

/// What became of the handle's moves, in order, with the clock of each.
#[derive(Debug)]
enum Did {
    Queued(Message, usize),
    Refused(Message, HandleError),
    CloseQueued(usize),
    CloseFailed(HandleError),
}

/// Another task using the hub's handle: it waits for the connection's id
/// (which `Handler::open` makes known), then plays its script.
struct Other {
    handle: HubHandle,
    script: Vec<Act>,
    next: usize,
    closing: Option<BoxFut<Result<(), HandleError>>>,
    did: Vec<Did>,
}

impl Other {
    /// Whether it made a move (a refused `try_send` is one: the task goes
    /// on without the message); polling a `close` that still waits is not.
    fn step(&mut self, cx: &mut Context<'_>, id: Option<ConnId>, clock: usize) -> bool {
        let Some(id) = id else {
            return false;
        };
        if self.closing.is_none() {
            let Some(act) = self.script.get(self.next).cloned() else {
                return false;
            };
            self.next += 1;
            match act {
                Act::Send(msg) => {
                    match self.handle.try_send(id, msg.clone()) {
                        Ok(()) => self.did.push(Did::Queued(msg, clock)),
                        Err(e) => self.did.push(Did::Refused(msg, e)),
                    }
                    return true;
                }
                Act::Close(code, reason) => {
                    let handle = self.handle.clone();
                    let mut closing: BoxFut<_> =
                        Box::pin(async move { handle.close(id, CloseCode(code), reason).await });
                    // Its first poll either queues it or waits in line.
                    if let Poll::Ready(r) = closing.as_mut().poll(cx) {
                        self.close_done(r, clock);
                    } else {
                        self.closing = Some(closing);
                    }
                    return true;
                }
            }
        }
        let Some(closing) = &mut self.closing else {
            return false;
        };
        let Poll::Ready(r) = closing.as_mut().poll(cx) else {
            return false;
        };
        self.closing = None;
        self.close_done(r, clock);
        true
    }

    fn close_done(&mut self, r: Result<(), HandleError>, clock: usize) {
        self.did.push(match r {
            Ok(()) => Did::CloseQueued(clock),
            Err(e) => Did::CloseFailed(e),
        });
    }

    fn done(&self) -> bool {
        self.closing.is_none() && self.next == self.script.len()
    }
}

/// The engine's waker: it says whether the engine asked to be polled.
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
}

/// Everything of one run.
struct World {
    engine: BoxFut<()>,
    engine_done: bool,
    woken: Arc<Flag>,
    waker: Waker,
    calls: Arc<Mutex<Vec<Call>>>,
    peer: Peer,
    other: Other,
    /// Counts every move of every party, to order them.
    clock: usize,
    /// The clock of every poll of the engine.
    polls: Vec<usize>,
}

impl World {
    fn new(scenario: &Scenario) -> Self {
        let recorder = Recorder::default();
        let calls = recorder.calls.clone();
        let config = crate::support::hub::defaults()
            .config(Config::default().ping_interval(None))
            .engines(Some(1))
            .read_buffer_size(4096)
            .handle_capacity(QUEUE);
        let hub = Hub::new(recorder, config).expect("a valid hub config");
        let handle = hub.handle();
        let adopter = hub.adopter();
        let (server, client) = tokio::io::duplex(PIPE);
        let mut adopt = std::pin::pin!(adopter.adopt(server, ()));
        let mut cx = Context::from_waker(Waker::noop());
        assert!(
            matches!(adopt.as_mut().poll(&mut cx), Poll::Ready(Ok(()))),
            "the queue has room for the connection"
        );
        // A task is scheduled for its first poll.
        let woken = Arc::new(Flag(AtomicBool::new(true)));
        World {
            engine: Box::pin(hub.run()),
            engine_done: false,
            waker: Waker::from(woken.clone()),
            woken,
            calls,
            peer: Peer::new(client, scenario.peer.clone()),
            other: Other {
                handle,
                script: scenario.other.clone(),
                next: 0,
                closing: None,
                did: Vec::new(),
            },
            clock: 0,
            polls: Vec::new(),
        }
    }

    fn tick(&mut self) -> usize {
        self.clock += 1;
        self.clock
    }

    fn poll_engine(&mut self) {
        let clock = self.tick();
        self.polls.push(clock);
        self.woken.0.store(false, Ordering::Release);
        let mut cx = Context::from_waker(&self.waker);
        if self.engine.as_mut().poll(&mut cx).is_ready() {
            self.engine_done = true;
        }
    }

    /// Polls the engine while it asks to be; whether it came to rest
    /// within [`SPINS`] polls.
    fn settle_engine(&mut self) -> bool {
        for _ in 0..SPINS {
            if !self.woken.0.load(Ordering::Acquire) || self.engine_done {
                return true;
            }
            self.poll_engine();
        }
        !self.woken.0.load(Ordering::Acquire)
    }

    fn write(&mut self) -> bool {
        let clock = self.tick();
        self.peer
            .write(&mut Context::from_waker(Waker::noop()), clock)
    }

    fn read(&mut self) -> bool {
        self.tick();
        self.peer.read(&mut Context::from_waker(Waker::noop()))
    }

    fn other(&mut self) -> bool {
        let clock = self.tick();
        let id = lock(&self.calls).iter().find_map(|c| match c {
            Call::Open(id) => Some(*id),
            _ => None,
        });
        self.other
            .step(&mut Context::from_waker(Waker::noop()), id, clock)
    }

    fn closed(&self) -> bool {
        lock(&self.calls)
            .iter()
            .any(|c| matches!(c, Call::Close(_)))
    }
}

#[derive(Clone, Copy, Debug)]
enum Step {
    Engine,
    Write,
    Read,
    Other,
}

const STEPS: [Step; 4] = [Step::Engine, Step::Write, Step::Read, Step::Other];

/// One scenario: the peer's frames (its close last), the handle's moves.
struct Scenario {
    name: &'static str,
    peer: Vec<Vec<u8>>,
    /// Payloads of handle messages start with `h`, the peer's never do:
    /// that tells them apart on the wire.
    other: Vec<Act>,
}

/// Runs `schedule`, drains and checks; whether its last step did
/// anything (if not, it ended where the schedule without it did, which
/// was checked already: nothing more is run).
fn run(scenario: &Scenario, schedule: &[Step]) -> bool {
    let mut w = World::new(scenario);
    let mut moved = true;
    for step in schedule {
        moved = match step {
            // Every poll counts, spurious ones too: an engine must take
            // them in its stride.
            Step::Engine => {
                w.poll_engine();
                true
            }
            Step::Write => w.write(),
            Step::Read => w.read(),
            Step::Other => w.other(),
        };
    }
    if !moved {
        return false;
    }
    // Drain fairly, polling the engine only when woken: a lost wake-up
    // leaves the connection stuck, and the drain does not finish.
    let name = scenario.name;
    for round in 0.. {
        assert!(
            round < ROUNDS,
            "{name} {schedule:?}: does not finish: peer wrote {}/{}, read {:?}, eof {}, \
             handle {:?}, handler {:?}",
            w.peer.written,
            w.peer.script.len(),
            split(&w.peer.read).0,
            w.peer.eof,
            w.other.did,
            lock(&w.calls),
        );
        assert!(
            w.settle_engine(),
            "{name} {schedule:?}: the engine keeps waking itself (a busy loop)"
        );
        assert!(!w.engine_done, "{name} {schedule:?}: the hub stopped");
        w.write();
        w.read();
        w.other();
        if w.closed() && w.peer.eof && w.other.done() {
            break;
        }
    }
    assert!(
        w.settle_engine(),
        "{name} {schedule:?}: with nothing left to do, the engine keeps waking itself"
    );
    check(scenario, schedule, &w);
    // Nothing of the connection is left: a shutdown stops the engine at
    // its next poll.
    let handle = w.other.handle.clone();
    let mut shutdown = std::pin::pin!(async move { handle.shutdown().await });
    let mut cx = Context::from_waker(Waker::noop());
    assert!(shutdown.as_mut().poll(&mut cx).is_ready());
    w.poll_engine();
    assert!(
        w.engine_done,
        "{name} {schedule:?}: the engine did not stop on shutdown"
    );
    true
}

/// A schedule and what came of it, for a failure's message; formatted
/// only then (formatting it for every schedule would cost more than
/// running it).
struct Why<'a> {
    name: &'static str,
    schedule: &'a [Step],
    wire: &'a [Wire],
    calls: &'a [Call],
    did: &'a [Did],
    peer: &'a [(u8, Vec<u8>)],
}

impl std::fmt::Display for Why<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {:?}\n  wire: {:?}\n  handler: {:?}\n  handle: {:?}\n  peer sent: {:?}",
            self.name, self.schedule, self.wire, self.calls, self.did, self.peer
        )
    }
}

fn check(scenario: &Scenario, schedule: &[Step], w: &World) {
    let calls = lock(&w.calls);
    let (wire, left) = split(&w.peer.read);
    let peer: Vec<(u8, Vec<u8>)> = w.peer.frames.iter().map(|f| unmask(f)).collect();
    let why = Why {
        name: scenario.name,
        schedule,
        wire: &wire,
        calls: &calls,
        did: &w.other.did,
        peer: &peer,
    };

    // The wire: whole server frames, one close, last, then the end.
    assert_eq!(left, 0, "{why}: a torn frame");
    for f in &wire {
        assert!(f.fin && f.rsv == 0 && !f.masked, "{why}: frame {f:?}");
        assert!(matches!(f.opcode, 1 | 2 | 8 | 10), "{why}: frame {f:?}");
    }
    let closes = wire.iter().filter(|f| f.opcode == 8).count();
    assert_eq!(closes, 1, "{why}: close frames on the wire");
    assert_eq!(
        wire.last().unwrap().opcode,
        8,
        "{why}: a frame after the close"
    );
    assert!(w.peer.eof, "{why}: the transport was not ended");
    assert!(
        !w.peer.write_failed,
        "{why}: the transport was dropped before the peer's close"
    );

    // The handler: opened first, closed once, last.
    let Some(Call::Open(id)) = calls.first() else {
        panic!("{why}: open is not the first call");
    };
    let opens = calls.iter().filter(|c| matches!(c, Call::Open(_))).count();
    assert_eq!(opens, 1, "{why}: open calls");
    let closed: Vec<&Closed> = calls
        .iter()
        .filter_map(|c| match c {
            Call::Close(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(closed.len(), 1, "{why}: close calls");
    assert!(
        matches!(calls.last(), Some(Call::Close(_))),
        "{why}: a call after close"
    );
    assert!(
        !calls.iter().any(|c| matches!(c, Call::Pong | Call::Drain)),
        "{why}: the peer sends no pongs, and no send met the backpressure limit"
    );

    // Who closed first: the server's close frame is the peer's echoed, or
    // the handle's.
    let ours = &wire.last().unwrap().payload;
    let peer_close = match peer.last() {
        Some((8, p)) => p,
        _ => panic!("{why}: the peer's last frame is not its close"),
    };
    let scripted_close = unmask(scenario.peer.last().unwrap()).1;
    let handle_close = scenario.other.iter().find_map(|a| match a {
        Act::Close(code, reason) => Some(close_payload(*code, reason)),
        _ => None,
    });
    let server_first = handle_close.as_ref() == Some(ours);
    if !server_first {
        assert_eq!(
            ours, &scripted_close,
            "{why}: the server's close is neither the peer's echoed nor the handle's"
        );
    }
    let closed = closed[0];
    assert_eq!(closed.id, *id, "{why}: close for another id");
    assert!(closed.error.is_none(), "{why}: a clean close with an error");
    assert_eq!(
        closed.frame,
        CloseFrame::parse(peer_close).unwrap(),
        "{why}: close does not report the peer's close frame"
    );

    // Messages: the peer's, in order, until the server's close was asked
    // for (all of them when the peer closed first), none after; every
    // echo was sent, and is on the wire.
    let sent: Vec<Message> = peer
        .iter()
        .filter(|(op, _)| matches!(op, 1 | 2))
        .map(|(op, p)| data_message(*op, p))
        .collect();
    let delivered: Vec<&Message> = calls
        .iter()
        .filter_map(|c| match c {
            Call::Message(m, _) => Some(m),
            _ => None,
        })
        .collect();
    assert_eq!(
        delivered,
        sent.iter().take(delivered.len()).collect::<Vec<_>>(),
        "{why}: the handler's messages are not the peer's, in order"
    );
    assert!(
        server_first || delivered.len() == sent.len(),
        "{why}: a message before the peer's close not handed to the handler"
    );
    let statuses: Vec<SendStatus> = calls
        .iter()
        .filter_map(|c| match c {
            Call::Message(_, s) => Some(*s),
            _ => None,
        })
        .collect();
    assert!(
        statuses.iter().all(|s| *s == SendStatus::Sent),
        "{why}: a message handed to the handler while closing: {statuses:?}"
    );
    let (from_handle, echoes): (Vec<Message>, Vec<Message>) = wire
        .iter()
        .filter(|f| matches!(f.opcode, 1 | 2))
        .map(|f| data_message(f.opcode, &f.payload))
        .partition(|m| m.as_payload().first() == Some(&b'h'));
    let expected: Vec<Message> = delivered.iter().map(|m| (*m).clone()).collect();
    assert_eq!(echoes, expected, "{why}: the echoes on the wire");

    // Pings: the handler sees the peer's in order until the server's close
    // was asked for, none while closing; the core answers each that came
    // before its close frame went out (those the handler saw, and perhaps
    // a few after the close was asked for), in order; all of them if the
    // peer closed first.
    let pings: Vec<&Vec<u8>> = peer
        .iter()
        .filter(|(op, _)| *op == 9)
        .map(|(_, p)| p)
        .collect();
    let handled: Vec<(&Vec<u8>, bool)> = calls
        .iter()
        .filter_map(|c| match c {
            Call::Ping(p, closing) => Some((p, *closing)),
            _ => None,
        })
        .collect();
    assert_eq!(
        handled.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
        pings[..handled.len()],
        "{why}: the handler's pings are not the peer's, in order"
    );
    assert!(
        handled.iter().all(|(_, closing)| !closing),
        "{why}: a ping handed to the handler while closing"
    );
    let pongs: Vec<&Vec<u8>> = wire
        .iter()
        .filter(|f| f.opcode == 10)
        .map(|f| &f.payload)
        .collect();
    assert_eq!(pongs, pings[..pongs.len()], "{why}: pongs");
    assert!(
        pongs.len() >= handled.len(),
        "{why}: a ping the handler saw unanswered"
    );
    if !server_first {
        assert_eq!(
            handled.len(),
            pings.len(),
            "{why}: a ping before the peer's close not handed to the handler"
        );
        assert_eq!(
            pongs, pings,
            "{why}: a ping before the peer's close unanswered"
        );
    }

    // The handle's messages: those queued, in order, never twice; all
    // queued before its close, and none after, when the close went first;
    // at least those the engine took (at its next poll) before the peer's
    // close was written, and before the handle's close.
    let close_at = w.other.did.iter().find_map(|d| match d {
        Did::CloseQueued(at) => Some(*at),
        _ => None,
    });
    for d in &w.other.did {
        match d {
            Did::Refused(m, HandleError::Full) => assert!(
                !from_handle.contains(m),
                "{why}: a message the queue refused went out"
            ),
            Did::Refused(_, e) | Did::CloseFailed(e) => panic!("{why}: {e}"),
            _ => {}
        }
    }
    assert!(
        !server_first || close_at.is_some(),
        "{why}: the handle's close on the wire, never queued"
    );
    let queued: Vec<(&Message, usize)> = w
        .other
        .did
        .iter()
        .filter_map(|d| match d {
            Did::Queued(m, at) => Some((m, *at)),
            _ => None,
        })
        .collect();
    let before_close = queued
        .iter()
        .take_while(|(_, at)| close_at.is_none_or(|c| *at < c))
        .count();
    // The engine takes every queued command at the start of a poll, before
    // it reads: a message queued before a poll that came before the peer's
    // close was all written found the connection open.
    let taken_open = queued[..before_close]
        .iter()
        .filter(|(_, at)| {
            w.polls
                .iter()
                .find(|p| *p > at)
                .is_some_and(|p| w.peer.close_written.is_none_or(|c| *p < c))
        })
        .count();
    let n = from_handle.len();
    assert!(
        n <= queued.len() && from_handle.iter().eq(queued[..n].iter().map(|(m, _)| *m)),
        "{why}: the handle's messages on the wire are not those queued, in order"
    );
    assert!(
        n >= taken_open,
        "{why}: {taken_open} handle messages taken while open, {n} on the wire"
    );
    assert!(
        n <= before_close,
        "{why}: a handle message queued after its close went out"
    );
    if server_first {
        assert_eq!(
            n, before_close,
            "{why}: a handle message queued before its close is missing"
        );
    }
}

/// Runs every schedule inside a runtime's context (the engine makes
/// `Sleep`s for its close timer) but outside any task, with the clock
/// paused: nothing fires by itself, so every schedule is deterministic.
fn explore(scenario: &Scenario) -> usize {
    let rt = paused_runtime();
    let _context = rt.enter();
    run(scenario, &[]);
    let mut count = 1;
    explore_from(scenario, &mut Vec::new(), depth(), &mut count);
    count
}

/// Every extension of `schedule` by a step, and theirs in turn, up to
/// `depth` steps; a step that does nothing ends its branch.
fn explore_from(scenario: &Scenario, schedule: &mut Vec<Step>, depth: usize, count: &mut usize) {
    if schedule.len() == depth {
        return;
    }
    for step in STEPS {
        schedule.push(step);
        if run(scenario, schedule) {
            *count += 1;
            explore_from(scenario, schedule, depth, count);
        }
        schedule.pop();
    }
}

/// The peer sends text, binary and pings and closes at the end; the handle
/// sends three messages meanwhile.
#[test]
fn peer_messages_pings_and_handle_sends_interleave_safely() {
    let scenario = Scenario {
        name: "messages",
        peer: vec![
            client_frame(9, b"p1"),
            client_frame(1, b"t1 hello"),
            client_frame(2, &[b'b', 1, 2, 3, 4, 5]),
            client_frame(9, b"p2"),
            client_frame(1, b"t2 bye"),
            client_frame(8, &close_payload(1000, "peer")),
        ],
        other: vec![
            Act::Send(Message::text(format!("h1{}", "x".repeat(28)))),
            Act::Send(Message::binary([b"h2".as_slice(), &[2; 18]].concat())),
            Act::Send(Message::text("h3 last")),
        ],
    };
    let n = explore(&scenario);
    eprintln!("{n} schedules");
}

/// The handle closes while the peer is still sending (and then closes
/// too, unless it answers the handle's close first) and while the handle
/// still has messages to send, before and after its close.
#[test]
fn a_handle_close_races_the_peer_and_the_handles_sends() {
    let scenario = Scenario {
        name: "handle close",
        peer: vec![
            client_frame(1, b"t1 first"),
            client_frame(9, b"p1"),
            client_frame(2, &[b'b', 9, 8, 7]),
            client_frame(1, b"t2 second"),
            client_frame(8, &close_payload(1000, "peer")),
        ],
        other: vec![
            Act::Send(Message::text(format!("h1{}", "y".repeat(30)))),
            Act::Send(Message::binary(b"h2".to_vec())),
            Act::Close(4001, "handle"),
            Act::Send(Message::text("h3 after close")),
        ],
    };
    let n = explore(&scenario);
    eprintln!("{n} schedules");
}

/// The peer pings and closes straight away; the handle's sends race its
/// close (some meet a full queue).
#[test]
fn handle_sends_racing_the_peers_close_are_delivered_or_dropped() {
    let scenario = Scenario {
        name: "peer close",
        peer: vec![
            client_frame(9, b"p"),
            client_frame(8, &close_payload(1000, "peer")),
        ],
        other: vec![
            Act::Send(Message::text(format!("h1{}", "a".repeat(28)))),
            Act::Send(Message::binary([b"h2".as_slice(), &[3; 23]].concat())),
            Act::Send(Message::text("h3 ten.")),
            Act::Send(Message::binary(b"h4!".to_vec())),
        ],
    };
    let n = explore(&scenario);
    eprintln!("{n} schedules");
}
