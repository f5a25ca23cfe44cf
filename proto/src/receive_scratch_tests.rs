//! [`Receiver::step_in`]: reads into the engine's buffer, messages decoded
//! where they lie.

use super::*;
use crate::buffer::CORK;
use crate::decoder::BorrowedData;
use crate::header::OpCode;

/// What a borrowed or owned message said, to compare.
#[derive(Debug, PartialEq)]
enum Got {
    Borrowed(Message),
    Owned(Message),
}

/// A step as the test keeps it: a borrowed message copied out.
#[derive(Debug, PartialEq)]
enum In {
    Borrowed(Message),
    Step(Step),
}

impl Side {
    fn step_in(&mut self, input: Input, scratch: &mut BytesMut) -> In {
        let now = self.now;
        match self
            .rx
            .step_in(&mut self.link, input, scratch, &mut OwnMemory, &|| now)
        {
            Stepped::Borrowed(BorrowedData::Text(t)) => In::Borrowed(Message::text(t.to_owned())),
            Stepped::Borrowed(BorrowedData::Binary(b)) => In::Borrowed(Message::binary(b.to_vec())),
            Stepped::Step(step) => In::Step(step),
        }
    }

    /// Steps from `input` until the next read, answering flushes, into
    /// `got`; the step that ended it.
    fn run_in(&mut self, mut input: Input, scratch: &mut BytesMut, got: &mut Vec<Got>) -> Step {
        loop {
            input = match self.step_in(input, scratch) {
                In::Borrowed(m) => {
                    got.push(Got::Borrowed(m));
                    Input::Start
                }
                In::Step(Step::Message(m)) => {
                    got.push(Got::Owned(m));
                    Input::Start
                }
                In::Step(Step::Flush) => Input::Flushed(false),
                In::Step(Step::WriteNow) => Input::Start,
                In::Step(step) => return step,
            };
        }
    }

    /// Answers a read step: `bytes` into `scratch` for a scratch plan, into
    /// the inbox's buffer otherwise (what fits), then steps on to the next
    /// read. How many bytes were taken.
    fn read_in(
        &mut self,
        step: Step,
        bytes: &[u8],
        scratch: &mut BytesMut,
        got: &mut Vec<Got>,
    ) -> (Step, usize) {
        // A flush first is the test's to ignore: nothing is written.
        let (Step::Read(plan) | Step::FlushRead(plan)) = step else {
            panic!("expected a read, got {step:?}");
        };
        let n = match plan {
            Plan::Scratch { limit } => {
                assert!(scratch.is_empty(), "a read into a buffer left full");
                let n = bytes.len().min(limit);
                scratch.extend_from_slice(&bytes[..n]);
                n
            }
            _ => {
                let inbox = self.rx.inbox_mut();
                let mut target = inbox.target();
                let buf = target.get_ref();
                let room = (buf.capacity() - buf.len()).min(bytes::buf::Limit::limit(&target));
                let n = bytes.len().min(room);
                target.put_slice(&bytes[..n]);
                inbox.read_done(Some(n), &mut OwnMemory);
                n
            }
        };
        (self.run_in(Input::Read(Ok(n)), scratch, got), n)
    }
}

fn client_wire(msgs: &[Message]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in msgs {
        out.extend_from_slice(&wire(m, Role::Client));
    }
    out
}

#[test]
fn whole_one_frame_messages_are_borrowed_and_the_buffer_left_empty() {
    let mut s = Side::server(true);
    let mut scratch = BytesMut::with_capacity(4096);
    let mut got = Vec::new();
    let first = s.run_in(Input::Start, &mut scratch, &mut got);
    let bytes = client_wire(&[
        Message::text("one"),
        Message::binary(vec![1, 2, 3]),
        Message::text("three"),
    ]);
    let (next, _) = s.read_in(first, &bytes, &mut scratch, &mut got);
    assert_eq!(
        got,
        [
            Got::Borrowed(Message::text("one")),
            Got::Borrowed(Message::binary(vec![1, 2, 3])),
            Got::Borrowed(Message::text("three")),
        ]
    );
    assert!(
        matches!(next, Step::FlushRead(Plan::Scratch { .. })),
        "{next:?}"
    );
    assert!(scratch.is_empty());
    assert!(s.rx.inbox().is_at_rest());
    // The buffer's start moved on past what was read (not cleared back to
    // its whole capacity).
    assert!(scratch.capacity() <= 4096 - bytes.len());
    // A data message needs no lock on the connection (the one call: the
    // deadline before the first read).
    assert_eq!(s.link.calls, 1);
}

#[test]
fn an_unfinished_frame_becomes_the_inboxs_and_is_finished_there() {
    let mut s = Side::server(true);
    let mut scratch = BytesMut::with_capacity(4096);
    let mut got = Vec::new();
    let bytes = client_wire(&[Message::text("whole"), Message::binary(vec![9; 300])]);
    let mut step = s.run_in(Input::Start, &mut scratch, &mut got);
    // The first read ends 100 bytes into the second frame.
    let cut = bytes.len() - 200;
    let (next, _) = s.read_in(step, &bytes[..cut], &mut scratch, &mut got);
    assert_eq!(got, [Got::Borrowed(Message::text("whole"))]);
    assert!(
        scratch.is_empty(),
        "the rest was left in the engine's buffer"
    );
    assert!(!s.rx.inbox().buffered().is_empty());
    step = next;
    let (_, n) = s.read_in(step, &bytes[cut..], &mut scratch, &mut got);
    assert_eq!(n, 200);
    assert_eq!(got[1], Got::Owned(Message::binary(vec![9; 300])));
}

#[test]
fn fragments_and_control_frames_are_handed_out_owned() {
    let mut s = Side::server(true);
    let mut scratch = BytesMut::with_capacity(4096);
    let mut got = Vec::new();
    let mut bytes = Vec::new();
    let mut enc = FrameEncoder::new(Role::Client);
    let mut out = BytesMut::new();
    enc.encode_frame(false, OpCode::Text, b"ab", &mut out)
        .unwrap();
    enc.encode_message(&Message::Ping(b"p"[..].into()), &mut out)
        .unwrap();
    enc.encode_frame(true, OpCode::Continuation, b"cd", &mut out)
        .unwrap();
    bytes.extend_from_slice(&out);
    bytes.extend_from_slice(&client_wire(&[Message::text("after")]));
    let first = s.run_in(Input::Start, &mut scratch, &mut got);
    let _ = s.read_in(first, &bytes, &mut scratch, &mut got);
    assert_eq!(
        got,
        [
            Got::Owned(Message::Ping(b"p"[..].into())),
            Got::Owned(Message::text("abcd")),
            Got::Borrowed(Message::text("after")),
        ]
    );
    assert!(s.link.sent.iter().any(|m| matches!(m, Message::Pong(_))));
    assert!(scratch.is_empty());
}

#[test]
fn invalid_text_borrowed_fails_the_connection_with_1007() {
    let mut s = Side::server(true);
    let mut scratch = BytesMut::with_capacity(4096);
    let mut got = Vec::new();
    let mut bad = wire(&Message::binary(vec![0xff, 0xfe]), Role::Client);
    bad[0] = 0x81; // FIN + text
    let mut bytes = client_wire(&[Message::text("ok")]);
    bytes.extend_from_slice(&bad);
    bytes.extend_from_slice(&client_wire(&[Message::text("never")]));
    let first = s.run_in(Input::Start, &mut scratch, &mut got);
    let (next, _) = s.read_in(first, &bytes, &mut scratch, &mut got);
    assert_eq!(got, [Got::Borrowed(Message::text("ok"))]);
    assert_eq!(next, Step::Finish { shut_down: true });
    assert!(scratch.is_empty());
    assert!(
        s.rx.inbox().is_at_rest(),
        "input after the failure is dropped"
    );
    let Some(Message::Close(Some(frame))) = s.link.sent.last() else {
        panic!("{:?}", s.link.sent)
    };
    assert_eq!(frame.code, CloseCode::INVALID_PAYLOAD);
}

#[test]
fn a_quiet_receiver_hands_out_only_the_peers_close_after_its_own() {
    let mut s = Side::server(true);
    s.rx.set_quiet_after_close(true);
    let mut scratch = BytesMut::with_capacity(4096);
    let mut got = Vec::new();
    let first = s.run_in(Input::Start, &mut scratch, &mut got);
    let (next, _) = s.read_in(
        first,
        &client_wire(&[Message::text("before")]),
        &mut scratch,
        &mut got,
    );
    assert_eq!(got, [Got::Borrowed(Message::text("before"))]);
    // Our close goes out.
    let now = s.now;
    s.link.conn.send_close(now);
    let bytes = client_wire(&[
        Message::text("late"),
        Message::binary(vec![1; 10]),
        Message::Ping(b"x"[..].into()),
        close(CloseCode::NORMAL),
    ]);
    let (end, _) = s.read_in(next, &bytes, &mut scratch, &mut got);
    // Not handed out; the peer's close is.
    assert_eq!(&got[1..], [Got::Owned(close(CloseCode::NORMAL))]);
    assert_eq!(end, Step::Finish { shut_down: true });
    // Not quiet (the Stream): the same data is handed out.
    let mut s = Side::server(true);
    let first = s.run_in(Input::Start, &mut scratch, &mut got);
    let now = s.now;
    s.link.conn.send_close(now);
    got.clear();
    let _ = s.read_in(
        first,
        &client_wire(&[Message::text("late")]),
        &mut scratch,
        &mut got,
    );
    assert_eq!(got, [Got::Borrowed(Message::text("late"))]);
}

#[test]
fn input_held_back_waits_in_the_inbox_and_is_decoded_after() {
    let mut s = Side::server(true);
    let mut scratch = BytesMut::with_capacity(4096);
    let mut got = Vec::new();
    let first = s.run_in(Input::Start, &mut scratch, &mut got);
    let (Step::Read(Plan::Scratch { .. }) | Step::FlushRead(Plan::Scratch { .. })) = first else {
        panic!("{first:?}")
    };
    let bytes = client_wire(&[Message::text("a"), Message::text("b")]);
    scratch.extend_from_slice(&bytes);
    // The engine holds input from the first message on (its handler asked
    // to close).
    let step = s.step_in(Input::Read(Ok(bytes.len())), &mut scratch);
    assert_eq!(step, In::Borrowed(Message::text("a")));
    s.link.holds = true;
    assert_eq!(s.step_in(Input::Start, &mut scratch), In::Step(Step::Wait));
    assert!(scratch.is_empty(), "the engine's buffer is free for others");
    s.link.holds = false;
    let next = s.run_in(Input::Start, &mut scratch, &mut got);
    assert_eq!(got, [Got::Owned(Message::text("b"))]);
    assert!(matches!(next, Step::FlushRead(_)), "{next:?}");
}

#[test]
fn a_corks_worth_of_replies_is_flushed_between_messages() {
    let mut s = Side::server(true);
    let mut scratch = BytesMut::with_capacity(4096);
    let mut got = Vec::new();
    let first = s.run_in(Input::Start, &mut scratch, &mut got);
    let bytes = client_wire(&[Message::text("a"), Message::text("b")]);
    scratch.extend_from_slice(&bytes);
    let _ = first;
    let step = s.step_in(Input::Read(Ok(bytes.len())), &mut scratch);
    assert_eq!(step, In::Borrowed(Message::text("a")));
    // The application's replies reach a cork's worth.
    s.link.queued = CORK;
    assert_eq!(s.step_in(Input::Start, &mut scratch), In::Step(Step::Flush));
    assert!(
        !scratch.is_empty(),
        "the rest of the read stays where it is"
    );
    s.link.queued = 0;
    let step = s.step_in(Input::Flushed(false), &mut scratch);
    assert_eq!(step, In::Borrowed(Message::text("b")));
}

#[test]
fn a_read_that_brings_nothing_gives_its_budget_back() {
    use crate::budget::MemoryBudget;
    let budget = MemoryBudget::new(1 << 20).allowance(0);
    let limits = Limits::default().budget(budget.clone());
    let mut s = Side::with_limits(Role::Server, Timers::default(), limits, true);
    let mut scratch = BytesMut::new();
    let mut got = Vec::new();
    let first = s.run_in(Input::Start, &mut scratch, &mut got);
    let (Step::Read(Plan::Scratch { limit }) | Step::FlushRead(Plan::Scratch { limit })) = first
    else {
        panic!("{first:?}")
    };
    assert!(limit < usize::MAX);
    assert!(s.rx.inbox().holds_budget(), "room set aside for the read");
    assert_eq!(
        s.step_in(Input::ReadPending, &mut scratch),
        In::Step(Step::Wait)
    );
    assert!(!s.rx.inbox().holds_budget());
    // A flush before the read that finds the peer behind: nothing is read,
    // and the room goes back too.
    let In::Step(Step::FlushRead(Plan::Scratch { .. })) = s.step_in(Input::Start, &mut scratch)
    else {
        panic!()
    };
    assert!(s.rx.inbox().holds_budget());
    assert_eq!(
        s.step_in(Input::FlushBlocked, &mut scratch),
        In::Step(Step::Wait)
    );
    assert!(!s.rx.inbox().holds_budget());
}

/// The same bytes, cut into reads anywhere, give the same messages through
/// the engine's buffer as through the inbox's.
#[test]
fn any_cut_gives_the_same_messages_as_the_inbox() {
    let msgs = [
        Message::text("hello"),
        Message::binary(vec![7; 200]),
        Message::Ping(b"pp"[..].into()),
        Message::text("x".repeat(70_000)),
        Message::binary(Vec::new()),
        Message::text("é"),
    ];
    let bytes = client_wire(&msgs);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..200 {
        let mut via_scratch = Side::server(true);
        let mut via_inbox = Side::server(true);
        let mut scratch = BytesMut::with_capacity(1 << 17);
        let mut got = Vec::new();
        let mut want = Vec::new();
        let mut step = via_scratch.run_in(Input::Start, &mut scratch, &mut got);
        let mut at = 0;
        while at < bytes.len() {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = 1 + (seed % 9000) as usize;
            let end = (at + len).min(bytes.len());
            let (next, n) = via_scratch.read_in(step, &bytes[at..end], &mut scratch, &mut got);
            assert!(scratch.is_empty());
            step = next;
            at += n;
        }
        let mut istep = via_inbox.step(Input::Start);
        if istep == Step::Flush {
            istep = via_inbox.step(Input::Flushed(false));
        }
        let mut at = 0;
        while at < bytes.len() {
            let (mut next, n) = via_inbox.read_some(istep, &bytes[at..]);
            at += n;
            loop {
                let input = match next {
                    Step::Message(m) => {
                        want.push(m);
                        Input::Start
                    }
                    Step::Flush => Input::Flushed(false),
                    _ => break,
                };
                next = via_inbox.step(input);
            }
            istep = next;
        }
        let got: Vec<Message> = got
            .into_iter()
            .map(|g| match g {
                Got::Borrowed(m) | Got::Owned(m) => m,
            })
            .collect();
        assert_eq!(got, want);
        assert_eq!(got, msgs);
    }
}

#[test]
fn a_blocked_cork_flush_handles_the_rest_of_the_read_then_waits() {
    let mut s = Side::server(true);
    let mut scratch = BytesMut::with_capacity(4096);
    let mut got = Vec::new();
    let _ = s.run_in(Input::Start, &mut scratch, &mut got);
    let bytes = client_wire(&[Message::text("a"), Message::text("b"), Message::text("c")]);
    scratch.extend_from_slice(&bytes);
    let step = s.step_in(Input::Read(Ok(bytes.len())), &mut scratch);
    assert_eq!(step, In::Borrowed(Message::text("a")));
    s.link.queued = CORK;
    assert_eq!(s.step_in(Input::Start, &mut scratch), In::Step(Step::Flush));
    // The peer is behind: the rest of the read is handed out all the same,
    // without another flush per message.
    let step = s.step_in(Input::FlushBlocked, &mut scratch);
    assert_eq!(step, In::Borrowed(Message::text("b")));
    assert_eq!(
        s.step_in(Input::Start, &mut scratch),
        In::Borrowed(Message::text("c"))
    );
    // The read is done: the flush before the next read, blocked, waits
    // (nothing is read).
    let In::Step(Step::FlushRead(_)) = s.step_in(Input::Start, &mut scratch) else {
        panic!()
    };
    assert!(scratch.is_empty());
    assert_eq!(
        s.step_in(Input::FlushBlocked, &mut scratch),
        In::Step(Step::Wait)
    );
}

#[test]
fn a_read_that_finds_nothing_waits_without_a_step_unless_something_changed() {
    use crate::budget::MemoryBudget;
    let budget = MemoryBudget::new(1 << 20).allowance(0);
    let limits = Limits::default().budget(budget.clone());
    let mut s = Side::with_limits(Role::Server, Timers::default(), limits, true);
    let mut scratch = BytesMut::new();
    let mut got = Vec::new();
    let first = s.run_in(Input::Start, &mut scratch, &mut got);
    assert!(matches!(first, Step::FlushRead(Plan::Scratch { .. })));
    assert!(s.rx.inbox().holds_budget());
    // Nothing came: the engine waits, and the room set aside goes back.
    assert!(s.rx.read_pending(&s.link));
    assert!(!s.rx.inbox().holds_budget());
    // The connection changed while the read was made (a close went out):
    // the step looks again rather than waiting.
    let _ = s.run_in(Input::Start, &mut scratch, &mut got);
    let now = s.now;
    s.link.conn.send_close(now);
    assert!(!s.rx.read_pending(&s.link));
    let step = s.step_in(Input::ReadPending, &mut scratch);
    assert!(matches!(step, In::Step(Step::FlushRead(_))), "{step:?}");
}
