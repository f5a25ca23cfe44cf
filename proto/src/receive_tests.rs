use std::time::Duration;

use bytes::{BufMut, BytesMut};

use super::*;
use crate::close::CloseFrame;
use crate::conn::Timers;
use crate::decoder::MessageDecoder;
use crate::encoder::FrameEncoder;
use crate::inbox::OwnMemory;
use crate::limits::Limits;
use crate::role::Role;

/// An engine that owns its connection, counting every time the receiver
/// reaches into it, and keeping what the connection owes as "sent".
struct Own {
    conn: Connection,
    calls: usize,
    sent: Vec<Message>,
    transport_ended: bool,
    abandoned: bool,
    /// What [`Link::queued`] says.
    queued: usize,
    /// What [`Link::holds_input`] says.
    holds: bool,
}

impl Link for Own {
    fn state(&self) -> State {
        self.conn.state()
    }

    fn with_conn<T>(&mut self, f: impl FnOnce(&mut Connection) -> T) -> Result<T, Error> {
        self.calls += 1;
        let out = f(&mut self.conn);
        while let Some(msg) = self.conn.poll_transmit() {
            self.sent.push(msg);
        }
        Ok(out)
    }

    fn transport_ended(&mut self) {
        self.transport_ended = true;
    }

    fn abandon(&mut self) {
        self.abandoned = true;
    }

    fn queued(&self) -> usize {
        self.queued
    }

    fn holds_input(&self) -> bool {
        self.holds
    }
}

/// One side's receiver and connection, on a clock the test moves.
struct Side {
    rx: Receiver,
    link: Own,
    start: Instant,
    now: Instant,
}

impl Side {
    fn new(role: Role, timers: Timers, flush_all: bool) -> Side {
        Side::with_limits(role, timers, Limits::default(), flush_all)
    }

    fn with_limits(role: Role, timers: Timers, limits: Limits, flush_all: bool) -> Side {
        let now = Instant::now();
        let inbox = Inbox::new(MessageDecoder::new(role, limits), BytesMut::new());
        Side {
            rx: Receiver::new(inbox, flush_all),
            link: Own {
                conn: Connection::new(role, timers, now),
                calls: 0,
                sent: Vec::new(),
                transport_ended: false,
                abandoned: false,
                queued: 0,
                holds: false,
            },
            start: now,
            now,
        }
    }

    fn server(flush_all: bool) -> Side {
        Side::new(Role::Server, Timers::default(), flush_all)
    }

    fn at(&mut self, secs: u64) {
        self.now = self.start + Duration::from_secs(secs);
    }

    fn step(&mut self, input: Input) -> Step {
        let now = self.now;
        self.rx.step(&mut self.link, input, &mut OwnMemory, &|| now)
    }

    /// Answers a [`Step::Read`] with what of `bytes` its plan takes (a
    /// read into the inbox's buffer takes what fits, as a socket read
    /// does): the next step, and how many bytes were taken.
    fn read_some(&mut self, step: Step, bytes: &[u8]) -> (Step, usize) {
        let Step::Read(plan) = step else {
            panic!("expected a read, got {step:?}");
        };
        let n = match plan {
            Plan::Scratch { limit } => {
                // As an engine hands it over: a read that is one whole
                // message is decoded where it lies.
                let n = bytes.len().min(limit);
                self.rx
                    .received(&mut bytes[..n].to_vec(), false, &mut OwnMemory);
                n
            }
            _ => {
                let inbox = self.rx.inbox_mut();
                let mut target = inbox.target();
                let buf = target.get_ref();
                let room = (buf.capacity() - buf.len()).min(bytes::buf::Limit::limit(&target));
                assert!(room > 0, "a read planned with no room");
                let n = bytes.len().min(room);
                target.put_slice(&bytes[..n]);
                inbox.read_done(Some(n), &mut OwnMemory);
                n
            }
        };
        (self.step(Input::Read(Ok(n))), n)
    }

    /// Answers a [`Step::Read`] with all of `bytes`.
    fn read(&mut self, step: Step, bytes: &[u8]) -> Step {
        let (step, n) = self.read_some(step, bytes);
        assert_eq!(n, bytes.len());
        step
    }

    /// The first step and a read of `msg` as the peer sends it.
    fn receive(&mut self, msg: &Message) -> Step {
        let mut first = self.step(Input::Start);
        if first == Step::Flush {
            first = self.step(Input::Flushed(false));
        }
        let peer = match self.rx.role() {
            Role::Client => Role::Server,
            Role::Server => Role::Client,
        };
        self.read(first, &wire(msg, peer))
    }
}

fn wire(msg: &Message, from: Role) -> BytesMut {
    let mut out = BytesMut::new();
    FrameEncoder::new(from)
        .encode_message(msg, &mut out)
        .unwrap();
    out
}

fn close(code: CloseCode) -> Message {
    Message::Close(Some(CloseFrame::new(code, "")))
}

#[test]
fn a_data_message_reaches_the_application_without_the_connection() {
    let mut s = Side::new(
        Role::Server,
        Timers::default().ping_interval(Some(Duration::from_secs(30))),
        false,
    );
    assert_eq!(
        s.receive(&Message::text("a")),
        Step::Message(Message::text("a"))
    );
    // Once, before the first read: the deadline.
    assert_eq!(s.link.calls, 1);
    for text in ["b", "c"] {
        assert_eq!(
            s.receive(&Message::text(text)),
            Step::Message(Message::text(text))
        );
    }
    assert_eq!(s.link.calls, 1, "data messages reach the connection");
}

#[test]
fn input_under_keepalive_is_told_when_the_timer_fires() {
    let mut s = Side::new(
        Role::Server,
        Timers::default().ping_interval(Some(Duration::from_secs(30))),
        false,
    );
    s.at(20);
    assert_eq!(
        s.receive(&Message::text("a")),
        Step::Message(Message::text("a"))
    );
    let Step::Read(_) = s.step(Input::Start) else {
        panic!()
    };
    // The keepalive deadline set at the start (30 s) fires: the input at
    // 20 s is heard first, so no ping is due yet.
    let before = s.link.calls;
    s.at(31);
    let _ = s.step(Input::Timer);
    assert_eq!(s.link.calls, before + 1);
    assert!(s.link.sent.is_empty(), "pinged: {:?}", s.link.sent);
    // Nothing since: at 51 s the ping goes out.
    s.at(51);
    let _ = s.step(Input::Timer);
    assert!(
        s.link.sent.iter().any(Message::is_ping),
        "{:?}",
        s.link.sent
    );
}

#[test]
fn a_ping_is_handed_out_and_its_pong_flushed_before_the_next_read() {
    let mut s = Side::server(false);
    let ping = Message::Ping(bytes::Bytes::from_static(b"p"));
    assert_eq!(s.receive(&ping), Step::Message(ping));
    assert_eq!(
        s.link.sent,
        [Message::Pong(bytes::Bytes::from_static(b"p"))]
    );
    assert_eq!(s.step(Input::Start), Step::Flush);
    // A flush that took everything: read next.
    assert!(matches!(s.step(Input::Flushed(false)), Step::Read(_)));
    // Nothing came, and nothing changed: wait.
    assert_eq!(s.step(Input::ReadPending), Step::Wait);
}

/// With [`Receiver::set_flush_then_read`], the flush before a read and
/// the read are one step; what the receiver owes stays owed until a flush
/// wrote everything (a read's input after the step says it did).
#[test]
fn flush_then_read_is_one_step_and_the_pong_stays_owed_until_written() {
    let mut s = Side::server(false);
    s.rx.set_flush_then_read(true);
    let ping = Message::Ping(bytes::Bytes::from_static(b"p"));
    assert_eq!(s.receive(&ping), Step::Message(ping));
    assert!(matches!(s.step(Input::Start), Step::FlushRead(_)));
    // The flush left some owed (the transport took part): the read comes
    // as a step of its own, and the next poll flushes again.
    assert!(matches!(s.step(Input::Flushed(true)), Step::Read(_)));
    assert_eq!(s.step(Input::ReadPending), Step::Wait);
    // This time the flush wrote everything and the read brought a
    // message: nothing is owed any more.
    let Step::FlushRead(plan) = s.step(Input::Start) else {
        panic!("no flush and read")
    };
    let text = Message::text("t");
    assert_eq!(
        s.read(Step::Read(plan), &wire(&text, Role::Client)),
        Step::Message(text)
    );
    assert!(matches!(s.step(Input::Start), Step::Read(_)));
    // A read that finds nothing after such a step: the engine waits
    // without a step.
    s.receive(&Message::Ping(bytes::Bytes::from_static(b"q")));
    assert!(matches!(s.step(Input::Start), Step::FlushRead(_)));
    assert!(s.rx.read_pending(&s.link));
    assert!(matches!(s.step(Input::Start), Step::Read(_)));
    // Without the setting the same receiver asks for the flush alone.
    let mut plain = Side::server(false);
    plain.receive(&Message::Ping(bytes::Bytes::from_static(b"p")));
    assert_eq!(plain.step(Input::Start), Step::Flush);
}

#[test]
fn only_the_unsplit_engine_flushes_what_it_does_not_owe() {
    let mut split = Side::server(false);
    split.receive(&Message::text("a"));
    assert!(matches!(split.step(Input::Start), Step::Read(_)));

    let mut unsplit = Side::server(true);
    unsplit.receive(&Message::text("a"));
    assert_eq!(unsplit.step(Input::Start), Step::Flush);
    assert!(matches!(unsplit.step(Input::Flushed(false)), Step::Read(_)));
    // Once per read: a read that found nothing does not flush again.
    assert_eq!(unsplit.step(Input::ReadPending), Step::Wait);
    // A new poll does (the application may have queued more).
    assert_eq!(unsplit.step(Input::Start), Step::Flush);
}

#[test]
fn a_blocked_flush_waits_and_a_failed_one_ends_the_connection() {
    let mut s = Side::server(false);
    s.receive(&Message::Ping(bytes::Bytes::new()));
    assert_eq!(s.step(Input::Start), Step::Flush);
    assert_eq!(s.step(Input::FlushBlocked), Step::Wait);
    assert_eq!(s.step(Input::Start), Step::Flush);
    let broken = io::Error::from(io::ErrorKind::BrokenPipe);
    assert_eq!(
        s.step(Input::WriteFailed(broken)),
        Step::End(Some(Ended::Transport(io::ErrorKind::BrokenPipe.into())))
    );
    assert!(s.rx.is_done());
}

#[test]
fn the_peers_close_is_answered_before_it_is_handed_out() {
    let mut s = Side::server(false);
    let theirs = close(CloseCode::NORMAL);
    assert_eq!(s.receive(&theirs), Step::WriteNow);
    assert_eq!(s.link.sent, [close(CloseCode::NORMAL)]);
    assert_eq!(s.step(Input::Start), Step::Message(theirs));
    // A server ends the transport itself.
    assert_eq!(s.step(Input::Start), Step::Finish { shut_down: true });
    assert_eq!(s.step(Input::Finished), Step::End(None));
}

#[test]
fn a_client_waits_for_the_server_to_end_the_transport() {
    let mut s = Side::new(Role::Client, Timers::default(), false);
    let theirs = close(CloseCode::NORMAL);
    assert_eq!(s.receive(&theirs), Step::WriteNow);
    assert_eq!(s.step(Input::Start), Step::Message(theirs));
    assert_eq!(s.step(Input::Start), Step::Finish { shut_down: false });
    let drain = s.step(Input::Finished);
    // What the server still sends is dropped; its end is the clean end.
    let drain = s.read(drain, b"ignored");
    assert!(matches!(drain, Step::Read(_)), "{drain:?}");
    assert_eq!(s.step(Input::Read(Ok(0))), Step::End(None));
}

#[test]
fn an_end_without_a_close_frame_is_an_error() {
    let mut s = Side::server(false);
    let Step::Read(_) = s.step(Input::Start) else {
        panic!()
    };
    let eof = io::Error::from(io::ErrorKind::UnexpectedEof);
    assert_eq!(
        s.step(Input::Read(Ok(0))),
        Step::End(Some(Ended::Transport(eof)))
    );
    assert!(s.link.transport_ended);
}

#[test]
fn an_invalid_frame_fails_the_connection_with_its_close_code() {
    let mut s = Side::server(false);
    let first = s.step(Input::Start);
    // Opcode 3 is reserved.
    let step = s.read(first, &[0x83, 0x80, 1, 2, 3, 4]);
    assert_eq!(step, Step::Finish { shut_down: true });
    let [Message::Close(Some(frame))] = &s.link.sent[..] else {
        panic!("{:?}", s.link.sent)
    };
    assert_eq!(frame.code, CloseCode::PROTOCOL_ERROR);
    let Step::End(Some(Ended::Error(e))) = s.step(Input::Finished) else {
        panic!()
    };
    assert_eq!(e.close_code(), Some(CloseCode::PROTOCOL_ERROR));
}

#[test]
fn a_close_that_times_out_writes_what_it_can_and_ends() {
    let mut s = Side::new(
        Role::Server,
        Timers::default().close_timeout(Duration::from_secs(5)),
        false,
    );
    let _ = s.link.with_conn(|c| c.send_close(s.now));
    // Open still, waiting for the peer's answer.
    assert!(matches!(s.step(Input::Start), Step::Read(_)));
    // The close is not written in time.
    s.at(6);
    assert_eq!(s.step(Input::Timer), Step::WriteLast);
    let Step::End(Some(Ended::Error(_))) = s.step(Input::Start) else {
        panic!()
    };
    assert!(s.link.abandoned);
}

#[test]
fn an_applications_close_timer_ends_the_connection_only_past_the_deadline() {
    let mut s = Side::new(
        Role::Client,
        Timers::default().close_timeout(Duration::from_secs(5)),
        false,
    );
    let _ = s.link.with_conn(|c| c.send_close(s.now));
    // Early (the engine's deadline reckoned before the core's): wait on,
    // the connection as it was.
    s.at(4);
    assert_eq!(s.rx.close_timer(&mut s.link, s.now), None);
    assert!(!s.rx.is_done() && !s.link.abandoned);
    assert!(matches!(s.step(Input::Start), Step::Read(_)));
    // Past it: the core's error, the connection given up at once, and
    // nothing more to step (the error is reported once, by the close).
    s.at(5);
    let error = s.rx.close_timer(&mut s.link, s.now);
    assert_eq!(error, Some(Error::CloseTimeout));
    assert!(s.rx.is_done() && s.link.abandoned);
    assert_eq!(s.link.conn.phase(), Phase::TimedOut);
}

#[test]
fn a_close_not_yet_queued_times_out_from_when_it_was_asked_and_keepalive_waits() {
    let mut s = Side::new(
        Role::Client,
        Timers::default()
            .close_timeout(Duration::from_secs(10))
            .ping_interval(Some(Duration::from_secs(3)))
            .pong_timeout(Duration::from_secs(3)),
        false,
    );
    // Asked at 1 s; the frame never finds room in the write queue.
    s.at(1);
    s.link.conn.ask_close(None, s.now).unwrap();
    // Asked again (a close cut short and called again): no fresh timeout.
    s.at(5);
    s.link.conn.ask_close(None, s.now).unwrap();
    // Keepalive's deadlines pass meanwhile; the close's timer looks only
    // at the close's.
    s.at(10);
    assert_eq!(s.rx.close_timer(&mut s.link, s.now), None);
    assert_eq!(s.link.conn.phase(), Phase::Open);
    assert!(
        s.link.sent.is_empty(),
        "no keepalive ping from the close timer"
    );
    s.at(11);
    let error = s.rx.close_timer(&mut s.link, s.now);
    assert_eq!(error, Some(Error::CloseTimeout));
    assert!(s.rx.is_done() && s.link.abandoned);
}

#[test]
fn a_read_refused_by_the_budget_waits_for_it_then_goes_on() {
    use crate::budget::{BudgetAccount, Grant, Held, MemoryBudget};
    let budget = MemoryBudget::new(256 << 10).allowance(0);
    // Another connection holds most of it.
    let mut other = BudgetAccount::new(Some(budget.clone()));
    assert_eq!(other.try_set(Held::Fragments, 200 << 10), Grant::Granted);
    let limits = Limits::default().budget(budget.clone());
    let timers = Timers::default().budget_wait(Some(Duration::from_secs(10)));
    let mut s = Side::with_limits(Role::Server, timers, limits, false);
    let big = Message::binary(vec![7u8; 200_000]);
    let bytes = wire(&big, Role::Client);
    let mut step = s.step(Input::Start);
    let mut at = 0;
    while let Step::Read(_) = step {
        let (next, n) = s.read_some(step, &bytes[at..]);
        (step, at) = (next, at + n);
        assert!(budget.in_use() <= budget.limit(), "{}", budget.in_use());
    }
    let Step::WaitForBudget(wanted) = step else {
        panic!("no wait: {}", matches!(step, Step::Message(_)))
    };
    assert!(at < bytes.len());
    assert!(s.link.state().is_waiting_for_budget());
    assert!(budget.in_use() <= budget.limit());
    // Given back by the other: the read goes on, the message arrives whole.
    other.release_all();
    assert!(budget.available() >= wanted);
    let mut step = s.step(Input::BudgetReady);
    while let Step::Read(_) = step {
        let (next, n) = s.read_some(step, &bytes[at..]);
        (step, at) = (next, at + n);
    }
    assert!(step == Step::Message(big), "the message, whole");
    assert!(!s.link.state().is_waiting_for_budget());
}

#[test]
fn holding_budget_without_a_budget_wait_reads_on() {
    use crate::budget::MemoryBudget;
    let limits = Limits::default().budget(MemoryBudget::new(1 << 20).allowance(0));
    // No budget wait in the timers: nothing times the wait.
    let mut s = Side::with_limits(Role::Server, Timers::default(), limits, false);
    let bytes = wire(&Message::binary(vec![1u8; 10_000]), Role::Client);
    let first = s.step(Input::Start);
    let step = s.read(first, &bytes[..100]);
    assert!(s.rx.inbox().holds_budget());
    assert!(matches!(step, Step::Read(_)), "{step:?}");
    assert_eq!(s.step(Input::ReadPending), Step::Wait);
}

#[test]
fn a_deadline_is_looked_at_before_each_read_and_only_then() {
    let mut s = Side::new(
        Role::Server,
        Timers::default().ping_interval(Some(Duration::from_secs(30))),
        false,
    );
    let mut bytes = wire(&Message::text("a"), Role::Client);
    bytes.extend_from_slice(&wire(&Message::text("b"), Role::Client));
    let first = s.step(Input::Start);
    assert_eq!(s.read(first, &bytes), Step::Message(Message::text("a")));
    // Past the keepalive deadline, "b" is still to be taken: it is, and
    // nothing is sent meanwhile.
    s.at(31);
    assert_eq!(s.step(Input::Start), Step::Message(Message::text("b")));
    assert!(s.link.sent.is_empty(), "pinged: {:?}", s.link.sent);
    // Before the next read the deadline is looked at (the input at 0 s
    // was heard): the ping goes out before reading on.
    assert_eq!(s.step(Input::Start), Step::Flush);
    assert!(
        s.link.sent.iter().any(Message::is_ping),
        "{:?}",
        s.link.sent
    );
}

#[test]
fn a_close_deadline_passes_though_input_is_always_ready() {
    let mut s = Side::new(
        Role::Server,
        Timers::default().close_timeout(Duration::from_secs(5)),
        false,
    );
    let _ = s.link.with_conn(|c| c.send_close(s.now));
    let mut step = s.step(Input::Start);
    // The peer floods and never answers: at 6 s, before the next read,
    // the connection times out.
    for secs in 0..7 {
        s.at(secs);
        let Step::Read(_) = step else {
            assert_eq!(secs, 6, "ended early: {step:?}");
            break;
        };
        step = s.read(step, &wire(&Message::text("x"), Role::Client));
        assert_eq!(step, Step::Message(Message::text("x")));
        step = s.step(Input::Start);
    }
    assert_eq!(step, Step::WriteLast);
}

#[test]
fn input_remembered_under_keepalive_does_not_end_a_later_budget_wait() {
    use crate::budget::MemoryBudget;
    let budget = MemoryBudget::new(1 << 20).allowance(0);
    let limits = Limits::default().budget(budget);
    let timers = Timers::default()
        .ping_interval(Some(Duration::from_secs(60)))
        .budget_wait(Some(Duration::from_secs(5)));
    let mut s = Side::with_limits(Role::Server, timers, limits, false);
    // Part of a large message, then nothing: the read's input (at 0 s) is
    // remembered, the budget wait starts as the next read waits.
    let bytes = wire(&Message::binary(vec![1u8; 32 << 10]), Role::Client);
    let first = s.step(Input::Start);
    let step = s.read(first, &bytes[..200]);
    assert!(matches!(step, Step::Read(_)), "{step:?}");
    assert!(s.link.state().is_waiting_for_budget());
    assert_eq!(s.step(Input::ReadPending), Step::Wait);
    // Its deadline: 1013, not a wait begun again by the older input.
    s.at(5);
    let step = s.step(Input::Timer);
    assert_eq!(step, Step::Finish { shut_down: true });
    let [Message::Close(Some(frame))] = &s.link.sent[..] else {
        panic!("{:?}", s.link.sent)
    };
    assert_eq!(frame.code, CloseCode::TRY_AGAIN_LATER);
}

#[path = "receive_scratch_tests.rs"]
mod scratch;

/// What [`Receiver::received`] takes: a read that is one whole one-frame
/// data message is decoded where it lies, the inbox's buffer untouched.
fn received_alone(s: &mut Side, bytes: &[u8]) -> Step {
    let Step::Read(Plan::Scratch { .. }) = s.step(Input::Start) else {
        panic!("no read into the engine's memory")
    };
    s.rx.received(&mut bytes.to_vec(), false, &mut OwnMemory);
    s.step(Input::Read(Ok(bytes.len())))
}

/// A read of one whole message is decoded from the engine's memory, with
/// the same outcome as through the inbox's buffer: the message, or the
/// close code of the rule it breaks (1007, 1009, 1002). Reads of more
/// (or less) than one frame, and reads under a memory budget, go through
/// the buffer.
#[test]
fn a_read_of_one_whole_message_is_decoded_where_it_lies() {
    let text = Message::text("hello");
    let mut s = Side::server(false);
    assert_eq!(
        received_alone(&mut s, &wire(&text, Role::Client)),
        Step::Message(text.clone())
    );
    assert_eq!(
        s.rx.inbox().buffered().capacity(),
        0,
        "the buffer was not used"
    );
    let bin = Message::binary(vec![7u8; 300]);
    assert_eq!(
        received_alone(&mut s, &wire(&bin, Role::Client)),
        Step::Message(bin)
    );

    let bad_text = Message::Frame(crate::message::Frame::new(
        true,
        crate::header::OpCode::Text,
        bytes::Bytes::from_static(&[0xff]),
    ));
    let unmasked = wire(&text, Role::Server);
    let too_big = wire(&Message::binary(vec![1u8; 5]), Role::Client);
    for (bytes, limits, code) in [
        (
            wire(&bad_text, Role::Client),
            Limits::default(),
            CloseCode::INVALID_PAYLOAD,
        ),
        (
            too_big,
            Limits::default().max_message_size(4),
            CloseCode::MESSAGE_TOO_BIG,
        ),
        (unmasked, Limits::default(), CloseCode::PROTOCOL_ERROR),
    ] {
        let mut s = Side::with_limits(Role::Server, Timers::default(), limits, false);
        assert_eq!(
            received_alone(&mut s, &bytes),
            Step::Finish { shut_down: true }
        );
        let [Message::Close(Some(frame))] = &s.link.sent[..] else {
            panic!("{:?}", s.link.sent)
        };
        assert_eq!(frame.code, code);
    }

    // Two messages in one read: through the buffer, both handed out.
    let mut s = Side::server(false);
    let mut two = wire(&text, Role::Client);
    two.extend_from_slice(&wire(&Message::text("again"), Role::Client));
    let Step::Read(Plan::Scratch { .. }) = s.step(Input::Start) else {
        panic!()
    };
    s.rx.received(&mut two.to_vec(), false, &mut OwnMemory);
    assert_eq!(s.rx.inbox().buffered().len(), two.len());
    assert_eq!(
        s.step(Input::Read(Ok(two.len()))),
        Step::Message(text.clone())
    );
    assert_eq!(s.step(Input::Start), Step::Message(Message::text("again")));

    // Under a budget, through the buffer, whose charges the budget sees.
    let budget = crate::MemoryBudget::new(1 << 20);
    let limits = Limits::default().budget(budget);
    let mut s = Side::with_limits(Role::Server, Timers::default(), limits, false);
    let Step::Read(Plan::Scratch { .. }) = s.step(Input::Start) else {
        panic!()
    };
    let one = wire(&text, Role::Client);
    s.rx.received(&mut one.to_vec(), false, &mut OwnMemory);
    assert_eq!(s.rx.inbox().buffered().len(), one.len());
    assert_eq!(s.step(Input::Read(Ok(one.len()))), Step::Message(text));
}
