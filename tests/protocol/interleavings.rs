//! The split halves share the transport's write side, the outbox and the
//! protocol state. This explores their interleavings systematically: every
//! schedule of `DEPTH` steps, each step polling the receiver once, polling
//! the current send once, cancelling it, or letting the peer move bytes,
//! followed by a fair drain. Whatever the schedule:
//! - the bytes on the wire are whole frames, never interleaved;
//! - every ping the peer sent before our close frame gets its pong, in order;
//! - exactly one close frame leaves, and nothing after it;
//! - a message whose send returned `Ok` is on the wire, in order, and one
//!   refused or cancelled before it was queued is not;
//! - the receiver yields the peer's messages in order;
//! - both halves finish.
//!
//! `INTERLEAVE_DEPTH=N` explores deeper (default 7: 4^7 schedules per
//! scenario, a few seconds).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};
use wavesock::{
    CloseCode, CloseFrame, Config, Error, Message, Role, WebSocketReceiver, WebSocketSender,
    WebSocketStream,
};

use crate::support::interleave;

use interleave::{AsPayload, client_frame, depth, paused_runtime};

type Io = DuplexStream;
type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;
/// A receive in progress: it gives the receiver back with what it got.
type Next = BoxFut<'static, (WebSocketReceiver<Io>, Option<Result<Message, Error>>)>;
/// A send in progress: it gives the sender back with the outcome.
type Send = BoxFut<'static, (WebSocketSender<Io>, Result<(), Error>)>;

/// A server frame as the peer reads it.
#[derive(Debug, Clone, PartialEq)]
struct Wire {
    opcode: u8,
    payload: Vec<u8>,
}

/// Splits the server's bytes into frames; panics on a torn or interleaved one.
fn parse(mut bytes: &[u8], why: &str) -> Vec<Wire> {
    let mut frames = Vec::new();
    while !bytes.is_empty() {
        assert!(bytes.len() >= 2, "{why}: torn header: {bytes:?}");
        assert_eq!(bytes[0] & 0x70, 0, "RSV bits set: {bytes:?}");
        assert_eq!(bytes[1] & 0x80, 0, "a server frame was masked");
        let (len, head) = match bytes[1] & 0x7F {
            126 => (u16::from_be_bytes([bytes[2], bytes[3]]) as usize, 4),
            127 => panic!("no frame here is that large"),
            n => (n as usize, 2),
        };
        assert!(bytes.len() >= head + len, "{why}: torn frame: {bytes:?}");
        assert_ne!(bytes[0] & 0x80, 0, "a fragment: nothing here is fragmented");
        frames.push(Wire {
            opcode: bytes[0] & 0x0F,
            payload: bytes[head..head + len].to_vec(),
        });
        bytes = &bytes[head + len..];
    }
    frames
}

/// What the peer does: write its script, read what the server sends.
struct Peer {
    io: Io,
    script: Vec<u8>,
    written: usize,
    read: Vec<u8>,
}

impl Peer {
    fn step(&mut self, cx: &mut Context<'_>) {
        if self.written < self.script.len() {
            if let Poll::Ready(Ok(n)) =
                Pin::new(&mut self.io).poll_write(cx, &self.script[self.written..])
            {
                self.written += n;
            }
        }
        let mut buf = [0u8; 256];
        let mut rb = ReadBuf::new(&mut buf);
        if let Poll::Ready(Ok(())) = Pin::new(&mut self.io).poll_read(cx, &mut rb) {
            self.read.extend_from_slice(rb.filled());
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Step {
    Receive,
    Send,
    Cancel,
    Peer,
}

const STEPS: [Step; 4] = [Step::Receive, Step::Send, Step::Cancel, Step::Peer];

/// One scenario: what the peer sends, what our sender sends.
struct Scenario {
    peer: Vec<Vec<u8>>,
    sends: Vec<Message>,
}

#[derive(Debug, Default)]
struct Outcome {
    received: Vec<Message>,
    /// Per send: `Some(true)` Ok, `Some(false)` refused, `None` cancelled or
    /// never finished.
    sent: Vec<Option<bool>>,
}

fn run(scenario: &Scenario, schedule: &[Step]) {
    let (ours, theirs) = tokio::io::duplex(48);
    let ws = WebSocketStream::from_raw_socket(ours, Role::Server, Config::default()).unwrap();
    let (tx, rx) = ws.split();
    let mut peer = Peer {
        io: theirs,
        script: scenario.peer.concat(),
        written: 0,
        read: Vec::new(),
    };
    let mut cx = Context::from_waker(Waker::noop());
    let mut out = Outcome::default();

    let mut rx: Option<WebSocketReceiver<Io>> = Some(rx);
    let mut rx_done = false;
    let mut next: Option<Next> = None;
    let tx_keep: WebSocketSender<Io> = tx.clone();
    let mut tx: Option<WebSocketSender<Io>> = Some(tx);
    let mut pending_sends = scenario.sends.clone().into_iter();
    let mut send: Option<Send> = None;
    let mut send_index = 0;

    let poll_receive = |cx: &mut Context<'_>,
                        rx: &mut Option<WebSocketReceiver<Io>>,
                        next: &mut Option<Next>,
                        out: &mut Outcome,
                        rx_done: &mut bool| {
        if *rx_done {
            return;
        }
        if next.is_none() {
            let mut r = rx.take().expect("receiver");
            *next = Some(Box::pin(async move {
                let m = r.next().await;
                (r, m)
            }));
        }
        if let Poll::Ready((r, m)) = next.as_mut().unwrap().as_mut().poll(cx) {
            *next = None;
            *rx = Some(r);
            match m {
                Some(Ok(m)) => out.received.push(m),
                Some(Err(e)) => panic!("the receiver failed: {e}"),
                None => *rx_done = true,
            }
        }
    };
    let mut poll_send = |cx: &mut Context<'_>,
                         cancel: bool,
                         tx: &mut Option<WebSocketSender<Io>>,
                         send: &mut Option<Send>,
                         out: &mut Outcome,
                         send_index: &mut usize| {
        if cancel {
            if send.take().is_some() {
                // Cancelled: this send's outcome is unknown.
                *tx = Some(tx_keep.clone());
                out.sent.push(None);
            }
            return;
        }
        if send.is_none() {
            let Some(msg) = pending_sends.next() else {
                return;
            };
            let mut t = tx.take().expect("sender");
            *send = Some(Box::pin(async move {
                let r = if msg.is_close() {
                    t.close().await
                } else {
                    t.send(msg).await
                };
                (t, r)
            }));
            *send_index += 1;
        }
        if let Poll::Ready((t, r)) = send.as_mut().unwrap().as_mut().poll(cx) {
            *send = None;
            *tx = Some(t);
            out.sent.push(Some(r.is_ok()));
        }
    };

    for step in schedule {
        match step {
            Step::Receive => poll_receive(&mut cx, &mut rx, &mut next, &mut out, &mut rx_done),
            Step::Send => poll_send(
                &mut cx,
                false,
                &mut tx,
                &mut send,
                &mut out,
                &mut send_index,
            ),
            Step::Cancel => poll_send(&mut cx, true, &mut tx, &mut send, &mut out, &mut send_index),
            Step::Peer => peer.step(&mut cx),
        }
    }
    // Drain fairly until both halves are done.
    for round in 0.. {
        assert!(round < 10_000, "{schedule:?}: does not finish");
        poll_receive(&mut cx, &mut rx, &mut next, &mut out, &mut rx_done);
        poll_send(
            &mut cx,
            false,
            &mut tx,
            &mut send,
            &mut out,
            &mut send_index,
        );
        peer.step(&mut cx);
        let sends_done = send.is_none() && out.sent.len() == scenario.sends.len();
        if rx_done && sends_done && peer.written == peer.script.len() {
            // The last bytes out.
            for _ in 0..8 {
                peer.step(&mut cx);
            }
            break;
        }
    }
    check(
        scenario,
        schedule,
        &out,
        &parse(&peer.read, &format!("{schedule:?} {out:?}")),
    );
}

fn check(scenario: &Scenario, schedule: &[Step], out: &Outcome, wire: &[Wire]) {
    let why = format!("{schedule:?}: wire {wire:?}, outcome {out:?}");
    // One close frame, last.
    let closes = wire.iter().filter(|f| f.opcode == 8).count();
    assert_eq!(closes, 1, "{why}");
    assert_eq!(wire.last().unwrap().opcode, 8, "{why}");
    let close_at = wire.len() - 1;
    // What the receiver saw is the peer's script, in order.
    let expected: Vec<Message> = scenario
        .peer
        .iter()
        .map(|f| {
            let payload: Vec<u8> = {
                let key = &f[2..6];
                f[6..]
                    .iter()
                    .enumerate()
                    .map(|(i, b)| b ^ key[i % 4])
                    .collect()
            };
            match f[0] & 0x0F {
                1 => Message::text(String::from_utf8(payload).unwrap()),
                9 => Message::Ping(payload.into()),
                8 => Message::Close(CloseFrame::parse_for_test(&payload)),
                op => panic!("opcode {op}"),
            }
        })
        .collect();
    assert_eq!(out.received, expected, "{why}");
    // Pongs: one per ping that arrived before our close went out, in order,
    // all before the close.
    let pongs: Vec<&[u8]> = wire
        .iter()
        .filter(|f| f.opcode == 10)
        .map(|f| f.payload.as_slice())
        .collect();
    let pings: Vec<&[u8]> = expected
        .iter()
        .filter_map(|m| match m {
            Message::Ping(p) => Some(&p[..]),
            _ => None,
        })
        .collect();
    assert!(pings.starts_with(&pongs), "{why}");
    let our_close_first = wire[close_at].payload.as_slice() != close_payload(1000, b"peer");
    if !our_close_first {
        // We echoed the peer's close: every ping before it was answered.
        assert_eq!(pongs, pings, "{why}");
    }
    // Data: what a send reported Ok is on the wire, in order; what was
    // refused is not.
    let data: Vec<&Wire> = wire
        .iter()
        .filter(|f| f.opcode == 1 || f.opcode == 2)
        .collect();
    let mut at = 0;
    for (msg, outcome) in scenario.sends.iter().zip(&out.sent) {
        if msg.is_close() {
            continue;
        }
        let on_wire = data
            .get(at)
            .is_some_and(|f| f.payload.as_slice() == msg.as_payload());
        match outcome {
            Some(true) => {
                assert!(on_wire, "{why}: an accepted message is missing");
                at += 1;
            }
            Some(false) => assert!(!on_wire, "{why}: a refused message went out"),
            None => at += usize::from(on_wire),
        }
    }
    assert_eq!(at, data.len(), "{why}: a message went out twice or unasked");
}

fn close_payload(code: u16, reason: &[u8]) -> Vec<u8> {
    let mut p = code.to_be_bytes().to_vec();
    p.extend_from_slice(reason);
    p
}

trait ParseForTest {
    fn parse_for_test(payload: &[u8]) -> Option<CloseFrame>;
}

impl ParseForTest for CloseFrame {
    fn parse_for_test(payload: &[u8]) -> Option<CloseFrame> {
        let code = CloseCode(u16::from_be_bytes([payload[0], payload[1]]));
        Some(CloseFrame::new(
            code,
            std::str::from_utf8(&payload[2..]).unwrap(),
        ))
    }
}

/// Runs every schedule inside a runtime's context (timers need one) but
/// outside any task: the halves are polled by hand, and a task's
/// cooperative budget would make Tokio's I/O say `Pending` after a while.
fn explore(scenario: &Scenario) -> usize {
    let rt = paused_runtime();
    let _context = rt.enter();
    let depth = depth();
    let mut count = 0;
    let mut schedule = vec![Step::Receive; depth];
    for n in 0..STEPS.len().pow(depth as u32) {
        let mut k = n;
        for s in schedule.iter_mut() {
            *s = STEPS[k % STEPS.len()];
            k /= STEPS.len();
        }
        run(scenario, &schedule);
        count += 1;
    }
    count
}

/// The peer pings twice around a message and then closes; we send three
/// messages and close, racing it.
#[test]
fn pongs_closes_and_sends_interleave_safely() {
    let scenario = Scenario {
        peer: vec![
            client_frame(9, b"p1"),
            client_frame(1, b"hello"),
            client_frame(9, b"p2"),
            client_frame(8, &close_payload(1000, b"peer")),
        ],
        sends: vec![
            Message::text("x".repeat(40)),
            Message::binary(vec![2; 30]),
            Message::text("z"),
            Message::Close(Some(CloseFrame::new(CloseCode::NORMAL, "ours"))),
        ],
    };
    let n = explore(&scenario);
    eprintln!("{n} schedules");
}

/// The peer closes first, straight away; our sends race its close.
#[test]
fn sends_racing_the_peers_close_are_refused_or_delivered() {
    let scenario = Scenario {
        peer: vec![
            client_frame(9, b"p"),
            client_frame(8, &close_payload(1000, b"peer")),
        ],
        sends: vec![
            Message::text("a".repeat(20)),
            Message::text("b".repeat(20)),
            Message::Close(None),
        ],
    };
    let n = explore(&scenario);
    eprintln!("{n} schedules");
}
