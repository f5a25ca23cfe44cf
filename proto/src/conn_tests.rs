//! The connection's rules with a fake clock and no runtime: unit tests on
//! one `Connection`, and a `Pair` of client and server cores joined by
//! in-memory byte buffers, stepped by hand.

use std::time::{Duration, Instant};

use bytes::BytesMut;

use super::*;
use crate::decoder::MessageDecoder;
use crate::encoder::FrameEncoder;
use crate::error::ProtocolError;
use crate::limits::Limits;

const SEC: Duration = Duration::from_secs(1);

fn timers() -> Timers {
    Timers::default()
        .ping_interval(Some(30 * SEC))
        .pong_timeout(10 * SEC)
        .close_timeout(5 * SEC)
}

fn drain(conn: &mut Connection) -> Vec<Message> {
    std::iter::from_fn(|| conn.poll_transmit()).collect()
}

#[test]
fn each_ping_is_owed_a_pong_in_order() {
    let t0 = Instant::now();
    let mut c = Connection::new(Role::Server, Timers::default(), t0);
    c.handle_frame(&Message::Ping("a".into()), t0);
    c.handle_frame(&Message::Pong("ignored".into()), t0);
    c.handle_frame(&Message::Ping("b".into()), t0);
    assert_eq!(
        drain(&mut c),
        [Message::Pong("a".into()), Message::Pong("b".into())]
    );
    assert_eq!(c.phase(), Phase::Open);
    assert_eq!(c.poll_timeout(), None, "no keepalive, nothing to wake for");
}

/// A flood of pings while nothing is drained (the caller holds back what
/// is owed, as a hub does while a close it was asked for waits for the
/// end of the turn) owes a bounded number of pongs: the first ones in
/// order, the last answering the newest ping.
#[test]
fn owed_pongs_are_bounded_and_the_newest_ping_is_answered() {
    let t0 = Instant::now();
    let timers = Timers::default().ping_interval(Some(SEC));
    let mut c = Connection::new(Role::Server, timers, t0);
    // A keepalive ping owed among them keeps its place.
    c.handle_frame(&Message::Ping("0".into()), t0);
    c.handle_timeout(t0 + 2 * SEC);
    for i in 1..100_000u32 {
        c.handle_frame(&Message::Ping(i.to_string().into()), t0);
    }
    let owed = drain(&mut c);
    assert_eq!(owed.len(), OWED_PONGS_MAX + 1, "{owed:?}");
    assert_eq!(owed[0], Message::Pong("0".into()));
    assert!(owed[1].is_ping(), "the keepalive ping, in its place");
    for (i, m) in owed[2..OWED_PONGS_MAX].iter().enumerate() {
        assert_eq!(*m, Message::Pong((i + 1).to_string().into()));
    }
    assert_eq!(owed[OWED_PONGS_MAX], Message::Pong("99999".into()));
    // Drained, the next pings are answered one by one again.
    c.handle_frame(&Message::Ping("a".into()), t0);
    c.handle_frame(&Message::Ping("b".into()), t0);
    assert_eq!(
        drain(&mut c),
        [Message::Pong("a".into()), Message::Pong("b".into())]
    );
}

#[test]
fn no_pong_after_our_close() {
    let t0 = Instant::now();
    let mut c = Connection::new(Role::Client, Timers::default(), t0);
    assert!(c.send_close(t0));
    c.handle_frame(&Message::Ping("late".into()), t0);
    assert_eq!(drain(&mut c), []);
}

#[test]
fn peer_close_is_echoed_with_its_code_once() {
    let t0 = Instant::now();
    let mut c = Connection::new(Role::Server, Timers::default(), t0);
    let bye = Message::Close(Some(CloseFrame::new(CloseCode::GOING_AWAY, "bye")));
    c.handle_frame(&bye, t0);
    c.handle_frame(&bye, t0);
    assert_eq!(drain(&mut c), [bye]);
    assert_eq!(c.phase(), Phase::Closed);
    assert!(c.is_peer_gone());
    assert_eq!(
        c.check_send(OpCode::Text, true),
        Err(Error::ConnectionClosed)
    );
    assert!(!c.send_close(t0), "our close already went out");
}

#[test]
fn answer_to_our_close_is_not_echoed() {
    let t0 = Instant::now();
    let mut c = Connection::new(Role::Client, Timers::default(), t0);
    assert!(c.send_close(t0));
    assert!(!c.send_close(t0), "a second close is dropped");
    c.handle_frame(&Message::Close(None), t0);
    assert_eq!(drain(&mut c), []);
    assert_eq!(c.phase(), Phase::Closed);
    assert_eq!(
        c.check_send(OpCode::Binary, true),
        Err(Error::AlreadyClosed)
    );
}

#[test]
fn a_violation_closes_with_its_code_then_reports_it() {
    let cases = [
        (Error::Protocol(ProtocolError::MaskedFrame), 1002),
        (Error::InvalidUtf8, 1007),
        (Error::MessageTooLarge { size: 9, max: 8 }, 1009),
        (Error::FrameTooLarge { size: 9, max: 8 }, 1009),
    ];
    for (err, code) in cases {
        let t0 = Instant::now();
        let mut c = Connection::new(Role::Server, Timers::default(), t0);
        c.handle_error(err.clone(), t0);
        // A second error (the decoder is not asked again, but be safe)
        // changes nothing.
        c.handle_error(Error::InvalidUtf8, t0);
        let sent = drain(&mut c);
        assert_eq!(sent.len(), 1, "{err}");
        let Message::Close(Some(f)) = &sent[0] else {
            panic!("{sent:?}")
        };
        assert_eq!(f.code, CloseCode(code), "{err}");
        assert_eq!(c.phase(), Phase::Failing);
        assert_eq!(c.take_error(), Some(err));
        assert_eq!(c.take_error(), None);
    }
}

#[test]
fn a_violation_after_our_close_sends_no_second_close() {
    let t0 = Instant::now();
    let mut c = Connection::new(Role::Server, Timers::default(), t0);
    assert!(c.send_close(t0));
    c.handle_error(Error::InvalidUtf8, t0);
    assert_eq!(drain(&mut c), []);
    assert_eq!(c.phase(), Phase::Failing);
}

#[test]
fn keepalive_pings_after_silence_and_declares_a_silent_peer_dead() {
    let t0 = Instant::now();
    let mut c = Connection::new(Role::Client, timers(), t0);
    assert_eq!(c.poll_timeout(), Some(t0 + 30 * SEC));
    c.handle_timeout(t0 + 29 * SEC);
    assert_eq!(drain(&mut c), [], "not due yet");
    c.handle_timeout(t0 + 30 * SEC);
    assert_eq!(drain(&mut c), [Message::Ping(Default::default())]);
    assert_eq!(c.poll_timeout(), Some(t0 + 40 * SEC));
    c.handle_timeout(t0 + 40 * SEC);
    assert_eq!(c.phase(), Phase::TimedOut);
    let Some(Message::Close(Some(f))) = c.poll_transmit() else {
        panic!("a close saying why is owed")
    };
    assert_eq!(f.code, CloseCode::INTERNAL_ERROR);
    assert_eq!(c.take_error(), Some(Error::KeepaliveTimeout));
    assert_eq!(c.poll_timeout(), None);
}

#[test]
fn hearing_from_the_peer_postpones_the_ping_and_answers_it() {
    let t0 = Instant::now();
    let mut c = Connection::new(Role::Server, timers(), t0);
    c.handle_input(t0 + 20 * SEC);
    c.handle_timeout(t0 + 30 * SEC);
    assert_eq!(drain(&mut c), [], "heard 10 s ago");
    assert_eq!(c.poll_timeout(), Some(t0 + 50 * SEC));
    c.handle_timeout(t0 + 50 * SEC);
    assert_eq!(drain(&mut c).len(), 1, "the ping");
    // Any input after the ping counts as the answer.
    c.handle_input(t0 + 55 * SEC);
    c.handle_timeout(t0 + 60 * SEC);
    assert_eq!(c.phase(), Phase::Open);
    assert_eq!(drain(&mut c), [], "heard 5 s ago: next ping at 85 s");
    assert_eq!(c.poll_timeout(), Some(t0 + 85 * SEC));
}

#[test]
fn closing_handshake_times_out() {
    let t0 = Instant::now();
    let mut c = Connection::new(Role::Client, Timers::default().close_timeout(5 * SEC), t0);
    assert!(c.send_close(t0 + SEC));
    assert_eq!(c.poll_timeout(), Some(t0 + 6 * SEC));
    c.handle_timeout(t0 + 5 * SEC);
    assert_eq!(c.phase(), Phase::Open);
    c.handle_timeout(t0 + 6 * SEC);
    assert_eq!(c.phase(), Phase::TimedOut);
    assert_eq!(c.take_error(), Some(Error::CloseTimeout));
}

#[test]
fn our_close_starts_the_close_timer_when_sent() {
    let t0 = Instant::now();
    let mut c = Connection::new(Role::Server, Timers::default().close_timeout(5 * SEC), t0);
    assert_eq!(c.poll_timeout(), None);
    assert!(c.send_close(t0 + 2 * SEC));
    assert_eq!(c.poll_timeout(), Some(t0 + 7 * SEC));
    c.handle_timeout(t0 + 6 * SEC);
    assert_eq!(c.phase(), Phase::Open, "still waiting for the answer");
    assert_eq!(c.poll_timeout(), Some(t0 + 7 * SEC));
}

#[test]
fn an_asked_close_runs_its_deadline_from_the_first_ask() {
    let t0 = Instant::now();
    let mut c = Connection::new(Role::Client, Timers::default().close_timeout(5 * SEC), t0);
    // An invalid frame is refused at the ask, before any wait.
    let bad = CloseFrame::new(CloseCode::from(1005), "");
    assert!(c.ask_close(Some(&bad), t0).is_err());
    assert_eq!(
        c.close_deadline_from(t0 + SEC),
        Some(t0 + 6 * SEC),
        "nothing asked"
    );
    c.ask_close(None, t0 + SEC).unwrap();
    c.ask_close(None, t0 + 3 * SEC).unwrap();
    assert_eq!(
        c.close_deadline_from(t0 + 4 * SEC),
        Some(t0 + 6 * SEC),
        "first ask"
    );
    assert_eq!(c.close_asked(), Some(t0 + SEC));
    // Queued late (the write queue had no room), as of the ask: the
    // deadline runs from it, and the ask is done.
    assert!(c.send_close(c.close_asked().unwrap()));
    assert_eq!(c.close_deadline(), Some(t0 + 6 * SEC));
    assert_eq!(c.close_asked(), None);
    // Once sent, a later ask checks and records nothing.
    c.ask_close(Some(&bad), t0 + 5 * SEC).unwrap();
    assert_eq!(c.close_deadline(), Some(t0 + 6 * SEC));
    // Without a close timeout, nothing is recorded.
    let mut never = Connection::new(
        Role::Client,
        Timers::default().close_timeout(Duration::MAX),
        t0,
    );
    never.ask_close(None, t0).unwrap();
    assert_eq!(never.close_deadline_from(t0 + SEC), None);
}

#[test]
fn an_ask_cut_short_leaves_a_later_handshake_its_whole_timeout() {
    let t0 = Instant::now();
    let bye = Message::Close(Some(CloseFrame::new(CloseCode::NORMAL, "")));
    for how in ["send", "peer", "error"] {
        let mut c = Connection::new(Role::Client, Timers::default().close_timeout(5 * SEC), t0);
        // A close asked, cut short before its frame was queued, never
        // asked again; a minute later a handshake begins another way.
        c.ask_close(None, t0).unwrap();
        let later = t0 + 60 * SEC;
        match how {
            "send" => assert_eq!(c.handle_send(&bye, later), Ok(Outgoing::Send)),
            "peer" => c.handle_message(&bye, later),
            _ => c.handle_error(Error::Protocol(ProtocolError::ReservedBits), later),
        }
        assert_eq!(c.close_deadline(), Some(later + 5 * SEC), "{how}");
        assert_eq!(c.close_asked(), None, "{how}");
    }
}

#[test]
fn closing_again_gets_no_fresh_deadline() {
    let t0 = Instant::now();
    let mut c = Connection::new(Role::Client, Timers::default().close_timeout(5 * SEC), t0);
    assert_eq!(
        c.close_deadline_from(t0 + SEC),
        Some(t0 + 6 * SEC),
        "from now"
    );
    assert!(c.send_close(t0 + 2 * SEC));
    assert_eq!(
        c.close_deadline_from(t0 + 4 * SEC),
        Some(t0 + 7 * SEC),
        "the running one"
    );
    let huge = Connection::new(
        Role::Client,
        Timers::default().close_timeout(Duration::MAX - SEC),
        t0,
    );
    assert!(
        huge.close_deadline_from(t0).unwrap() > t0 + 1000 * SEC,
        "saturates, no panic"
    );
    let none = Connection::new(
        Role::Client,
        Timers::default().close_timeout(Duration::MAX),
        t0,
    );
    assert_eq!(none.close_deadline_from(t0), None, "no close timeout");
}

#[test]
fn no_keepalive_ping_once_closing() {
    let t0 = Instant::now();
    let mut c = Connection::new(Role::Client, timers(), t0);
    assert!(c.send_close(t0));
    c.handle_timeout(t0 + 3 * SEC);
    assert_eq!(drain(&mut c), []);
    c.handle_timeout(t0 + 5 * SEC);
    assert_eq!(c.take_error(), Some(Error::CloseTimeout));
}

#[test]
fn transport_end_is_expected_only_after_our_close() {
    let t0 = Instant::now();
    let mut c = Connection::new(Role::Client, Timers::default(), t0);
    assert!(!c.handle_transport_end());
    assert_eq!(
        c.check_send(OpCode::Text, true),
        Err(Error::ConnectionClosed)
    );
    assert!(!c.send_close(t0), "nobody to close to");
    let mut c = Connection::new(Role::Client, Timers::default(), t0);
    assert!(c.send_close(t0));
    assert!(c.handle_transport_end());
}

#[test]
fn fragments_may_not_be_interrupted_by_data() {
    let t0 = Instant::now();
    let mut c = Connection::new(Role::Client, Timers::default(), t0);
    assert!(c.check_send(OpCode::Continuation, true).is_err());
    c.check_send(OpCode::Text, false).unwrap();
    assert!(c.check_send(OpCode::Binary, true).is_err());
    c.check_send(OpCode::Ping, true).unwrap();
    c.check_send(OpCode::Continuation, false).unwrap();
    c.check_send(OpCode::Continuation, true).unwrap();
    c.check_send(OpCode::Binary, true).unwrap();
}

#[test]
fn accessors_report_the_state() {
    let t0 = Instant::now();
    let mut c = Connection::new(Role::Server, timers(), t0);
    assert!(!c.is_close_sent());
    assert!(!c.is_peer_gone());
    assert!(!c.is_transport_ended());
    assert!(c.state().hears_input(), "keepalive wants to hear of input");
    assert_eq!(c.close_timeout(), 5 * SEC);
    assert_eq!(c.role(), Role::Server);
    assert!(c.send_close(t0));
    assert!(c.is_close_sent());
    assert!(!c.is_peer_gone());
    let c = Connection::new(Role::Client, Timers::default(), t0);
    assert!(!c.state().hears_input(), "no keepalive, no need");
}

#[test]
fn a_close_frame_while_failing_changes_nothing() {
    let t0 = Instant::now();
    let mut c = Connection::new(Role::Server, Timers::default(), t0);
    c.handle_error(Error::InvalidUtf8, t0);
    c.handle_frame(&Message::Close(None), t0);
    assert_eq!(c.phase(), Phase::Failing);
    assert_eq!(drain(&mut c).len(), 1, "only the close for the error");
    assert_eq!(c.take_error(), Some(Error::InvalidUtf8));
}

#[test]
fn abandoning_drops_what_is_owed_and_ends_sending() {
    let t0 = Instant::now();
    let mut c = Connection::new(Role::Server, Timers::default(), t0);
    c.handle_frame(&Message::Ping("x".into()), t0);
    c.abandon();
    assert_eq!(c.poll_transmit(), None);
    assert!(c.is_close_sent());
    assert_eq!(c.check_send(OpCode::Text, true), Err(Error::AlreadyClosed));
}

fn budget_timers() -> Timers {
    Timers::default()
        .budget_wait(Some(5 * SEC))
        .close_timeout(3 * SEC)
}

#[test]
fn a_budget_wait_past_its_timeout_fails_with_1013() {
    let t0 = Instant::now();
    let mut c = Connection::new(Role::Server, budget_timers(), t0);
    assert!(!c.state().hears_input(), "no keepalive and no wait yet");
    c.handle_budget_wait(t0 + SEC);
    assert!(c.state().is_waiting_for_budget());
    assert!(c.state().hears_input(), "input ends the wait");
    assert_eq!(c.poll_timeout(), Some(t0 + 6 * SEC));
    // Asking again does not move the deadline.
    c.handle_budget_wait(t0 + 4 * SEC);
    assert_eq!(c.poll_timeout(), Some(t0 + 6 * SEC));
    c.handle_timeout(t0 + 5 * SEC);
    assert_eq!(c.phase(), Phase::Open);
    c.handle_timeout(t0 + 6 * SEC);
    assert_eq!(c.phase(), Phase::Failing);
    assert!(!c.state().is_waiting_for_budget());
    let close = drain(&mut c);
    assert_eq!(
        close,
        [Message::Close(Some(CloseFrame::new(
            CloseCode::TRY_AGAIN_LATER,
            "memory budget exhausted, try again later"
        )))]
    );
    assert_eq!(c.take_error(), Some(Error::BudgetExhausted));
    // Then only the close deadline is left.
    assert_eq!(c.poll_timeout(), Some(t0 + 9 * SEC));
}

#[test]
fn input_ends_the_budget_wait() {
    let t0 = Instant::now();
    let mut c = Connection::new(Role::Server, budget_timers(), t0);
    c.handle_budget_wait(t0);
    c.handle_input(t0 + 4 * SEC);
    assert!(!c.state().is_waiting_for_budget());
    assert!(!c.state().hears_input());
    assert_eq!(c.poll_timeout(), None);
    c.handle_timeout(t0 + 10 * SEC);
    assert_eq!(c.phase(), Phase::Open);
    // A new wait runs from its own start.
    c.handle_budget_wait(t0 + 10 * SEC);
    assert_eq!(c.poll_timeout(), Some(t0 + 15 * SEC));
}

#[test]
fn a_budget_wait_keeps_keepalive_listening_after_it_ends() {
    let t0 = Instant::now();
    let mut c = Connection::new(Role::Server, timers().budget_wait(Some(SEC)), t0);
    c.handle_budget_wait(t0);
    assert_eq!(c.poll_timeout(), Some(t0 + SEC), "the earlier deadline");
    c.handle_input(t0);
    assert!(c.state().hears_input(), "keepalive still wants input");
    assert_eq!(c.poll_timeout(), Some(t0 + 30 * SEC));
}

#[test]
fn an_over_budget_refusal_closes_with_1009() {
    let t0 = Instant::now();
    let mut c = Connection::new(Role::Server, budget_timers(), t0);
    let err = Error::OverBudget {
        size: 10,
        budget: 5,
    };
    c.handle_error(err.clone(), t0);
    assert_eq!(
        drain(&mut c),
        [Message::Close(Some(CloseFrame::new(
            CloseCode::MESSAGE_TOO_BIG,
            "message over the memory budget"
        )))]
    );
    assert_eq!(c.take_error(), Some(err));
}

#[test]
fn no_budget_wait_without_a_budget_or_once_ending() {
    let t0 = Instant::now();
    let mut c = Connection::new(Role::Server, Timers::default(), t0);
    c.handle_budget_wait(t0);
    assert!(!c.state().is_waiting_for_budget());
    assert_eq!(c.poll_timeout(), None);
    let mut c = Connection::new(Role::Server, budget_timers(), t0);
    c.handle_frame(&Message::Close(None), t0);
    c.handle_budget_wait(t0);
    assert!(!c.state().is_waiting_for_budget());
    assert_eq!(
        c.poll_timeout(),
        Some(t0 + 3 * SEC),
        "the close deadline only"
    );
}

#[test]
fn state_round_trips_through_its_byte() {
    let t0 = Instant::now();
    let mut c = Connection::new(Role::Client, budget_timers(), t0);
    let mut seen = vec![c.state()];
    c.handle_budget_wait(t0);
    seen.push(c.state());
    assert!(c.send_close(t0));
    seen.push(c.state());
    c.handle_frame(&Message::Close(None), t0);
    seen.push(c.state());
    c.handle_transport_end();
    seen.push(c.state());
    c.handle_timeout(t0 + 10 * SEC);
    seen.push(c.state());
    for s in &seen {
        assert_eq!(State::from_bits(s.to_bits()), *s);
    }
    let last = seen.last().unwrap();
    assert_eq!(last.phase(), Phase::TimedOut);
    assert!(last.is_close_sent() && last.is_close_received());
    assert!(last.is_peer_gone() && last.is_transport_ended());
    // Each input above changed the byte an engine publishes.
    for pair in seen.windows(2) {
        assert_ne!(pair[0], pair[1], "{pair:?}");
    }
}

#[test]
fn a_handshaking_connection_ends_at_its_deadline_owing_nothing() {
    let t0 = Instant::now();
    let mut c = Connection::handshaking(Role::Server, Some(t0 + 5 * SEC));
    assert_eq!(c.poll_timeout(), Some(t0 + 5 * SEC));
    c.handle_timeout(t0 + 4 * SEC);
    assert_eq!(c.phase(), Phase::Open);
    c.handle_timeout(t0 + 5 * SEC);
    assert_eq!(c.phase(), Phase::TimedOut);
    assert_eq!(c.take_error(), Some(Error::HandshakeTimeout));
    assert_eq!(drain(&mut c), [], "no WebSocket frame before the upgrade");
    assert_eq!(
        Connection::handshaking(Role::Server, None).poll_timeout(),
        None
    );
}

#[test]
fn a_refused_handshake_keeps_its_deadline_and_never_pings() {
    let t0 = Instant::now();
    let mut c = Connection::handshaking(Role::Server, Some(t0 + 5 * SEC));
    c.handle_refused();
    assert_eq!(c.phase(), Phase::Failing);
    assert!(c.is_close_sent(), "nothing more may be sent");
    assert_eq!(
        c.poll_timeout(),
        Some(t0 + 5 * SEC),
        "the answer's deadline"
    );
    assert!(
        c.handle_send(&Message::text("x"), t0).is_err(),
        "no frame after a refusal"
    );
    c.handle_timeout(t0 + 5 * SEC);
    assert_eq!(c.phase(), Phase::TimedOut);
    assert_eq!(drain(&mut c), [], "no ping, no close frame after HTTP");
    assert_eq!(c.take_error(), None, "a refusal is no error of the peer's");
}

#[test]
fn send_rules_close_checks_and_after_close() {
    let t0 = Instant::now();
    let mut c = Connection::new(Role::Client, timers(), t0);
    let bad = Message::Close(Some(CloseFrame::new(CloseCode::from(1005), "")));
    assert!(c.handle_send(&bad, t0).is_err(), "1005 may not be sent");
    assert!(!c.is_close_sent(), "a refused close is not recorded");
    assert_eq!(c.handle_send(&Message::text("a"), t0), Ok(Outgoing::Send));
    let bye = Message::Close(None);
    assert_eq!(c.handle_send(&bye, t0), Ok(Outgoing::Send));
    assert_eq!(c.poll_timeout(), Some(t0 + 5 * SEC), "the close timer runs");
    assert_eq!(c.handle_send(&bye, t0), Ok(Outgoing::Skip), "closing twice");
    assert_eq!(
        c.handle_send(&Message::text("b"), t0),
        Err(Error::AlreadyClosed)
    );

    let mut s = Connection::new(Role::Server, timers(), t0);
    s.handle_frame(&Message::Close(None), t0);
    assert_eq!(
        s.handle_send(&Message::binary(vec![1]), t0),
        Err(Error::ConnectionClosed),
        "the peer is gone"
    );
    assert_eq!(s.handle_send(&bye, t0), Ok(Outgoing::Skip));
    assert_eq!(
        s.handle_send_frame(OpCode::Continuation, true, t0),
        Err(Error::ConnectionClosed)
    );
}

#[test]
fn a_hang_up_after_our_close_is_quiet_and_any_other_end_reported() {
    use std::io::{Error as IoError, ErrorKind};
    let t0 = Instant::now();
    let mut open = Connection::new(Role::Client, timers(), t0);
    let err = open.handle_transport_error(ErrorKind::UnexpectedEof.into());
    assert_eq!(err.map(|e| e.kind()), Some(ErrorKind::UnexpectedEof));
    assert!(open.is_transport_ended());

    for kind in [
        ErrorKind::UnexpectedEof,
        ErrorKind::ConnectionReset,
        ErrorKind::ConnectionAborted,
        ErrorKind::BrokenPipe,
    ] {
        let mut c = Connection::new(Role::Client, timers(), t0);
        assert!(c.send_close(t0));
        assert!(c.handle_transport_error(kind.into()).is_none(), "{kind:?}");
    }
    let mut c = Connection::new(Role::Client, timers(), t0);
    assert!(c.send_close(t0));
    let other = c.handle_transport_error(IoError::other("tls alert"));
    assert!(
        other.is_some(),
        "a real failure is reported even when closing"
    );
    // Once ended otherwise, how it ended was decided: failing with its own
    // error, or closed by the peer.
    let mut failing = Connection::new(Role::Server, timers(), t0);
    failing.handle_error(Error::InvalidUtf8, t0);
    assert!(
        failing
            .handle_transport_error(IoError::other("reset"))
            .is_none()
    );
    assert_eq!(failing.take_error(), Some(Error::InvalidUtf8));
    let mut closed = Connection::new(Role::Server, timers(), t0);
    closed.handle_frame(&Message::Close(None), t0);
    assert!(
        closed
            .handle_transport_error(IoError::other("tls alert"))
            .is_none()
    );
}

#[test]
fn duration_max_settings_never_panic() {
    let t0 = Instant::now();
    let never = Timers::default()
        .ping_interval(Some(Duration::MAX))
        .pong_timeout(Duration::MAX)
        .close_timeout(Duration::MAX)
        .budget_wait(Some(Duration::MAX));
    let mut c = Connection::new(Role::Server, never, t0);
    assert!(c.poll_timeout().unwrap() > t0 + 365 * 24 * 3600 * SEC);
    c.handle_budget_wait(t0);
    c.handle_timeout(t0 + SEC);
    assert!(c.send_close(t0));
    assert!(c.poll_timeout().unwrap() > t0 + 365 * 24 * 3600 * SEC);
    assert_eq!(later(t0, Duration::MAX), later(t0, Duration::MAX));
    assert_eq!(later(t0, SEC), t0 + SEC);
}

#[test]
fn the_budgets_answers_go_on_wait_or_fail_with_1009() {
    use crate::budget::Grant;
    let t0 = Instant::now();
    let timers = Timers::default().budget_wait(Some(2 * SEC));
    let mut c = Connection::new(Role::Server, timers, t0);
    assert_eq!(c.handle_grant(Grant::Granted, t0), None);
    assert!(!c.state().is_waiting_for_budget());
    assert_eq!(c.handle_grant(Grant::Wait { wanted: 10 }, t0), Some(10));
    assert!(c.state().is_waiting_for_budget());
    assert_eq!(c.poll_timeout(), Some(t0 + 2 * SEC));
    c.handle_input(t0 + SEC);
    assert!(!c.state().is_waiting_for_budget(), "input ends the wait");
    let never = Grant::Never {
        charge: 20,
        limit: 10,
    };
    assert_eq!(c.handle_grant(never, t0 + SEC), None);
    assert_eq!(c.phase(), Phase::Failing);
    let close = drain(&mut c);
    assert!(
        matches!(&close[..], [Message::Close(Some(f))] if f.code == CloseCode::MESSAGE_TOO_BIG),
        "{close:?}"
    );
    assert_eq!(
        c.take_error(),
        Some(Error::OverBudget {
            size: 20,
            budget: 10
        })
    );
}

#[test]
fn without_a_close_timeout_no_closing_handshake_has_a_deadline() {
    // What lets the I/O layer run without a timer: a close timeout of
    // `Duration::MAX` is none, not a deadline a century off that still
    // needs one.
    let t0 = Instant::now();
    let none = Timers::default().close_timeout(Duration::MAX);
    // Our close, the peer's, and a protocol violation.
    let mut ours = Connection::new(Role::Client, none, t0);
    assert!(ours.send_close(t0));
    let mut theirs = Connection::new(Role::Server, none, t0);
    theirs.handle_frame(&Message::Close(None), t0);
    let mut failing = Connection::new(Role::Server, none, t0);
    failing.handle_error(Error::InvalidUtf8, t0);
    for (what, c) in [
        ("ours", &mut ours),
        ("theirs", &mut theirs),
        ("failing", &mut failing),
    ] {
        assert_eq!(c.poll_timeout(), None, "{what}");
        assert_eq!(c.close_timeout(), Duration::MAX, "{what}");
        c.handle_timeout(t0 + 1_000_000 * SEC);
        assert_ne!(c.phase(), Phase::TimedOut, "{what}");
    }
}

/// Two connections over an in-memory wire.
#[path = "conn_pair_tests.rs"]
mod pair;

/// How a connection began to end: the first closing event, whichever
/// follows, with its close code; nothing while open or when the transport
/// ended first.
#[test]
fn the_first_closing_event_is_how_it_ended() {
    let t0 = Instant::now();
    let new = || Connection::new(Role::Server, timers(), t0);
    let close = |code: u16| Message::Close(Some(CloseFrame::new(CloseCode(code), "")));

    let mut c = new();
    assert_eq!(c.ending(), None);
    c.handle_frame(&close(4000), t0);
    c.handle_error(Error::InvalidUtf8, t0);
    assert_eq!(c.ending(), Some(Ending::PeerClosed(Some(CloseCode(4000)))));

    let mut c = new();
    c.handle_frame(&Message::Close(None), t0);
    assert_eq!(c.ending(), Some(Ending::PeerClosed(None)));

    // Ours first; the peer's answer changes nothing.
    let mut c = new();
    assert_eq!(c.handle_send(&close(1001), t0).unwrap(), Outgoing::Send);
    c.handle_frame(&close(1000), t0);
    assert_eq!(c.ending(), Some(Ending::Closed(Some(CloseCode(1001)))));

    // A close frame sent already encoded: no code to tell.
    let mut c = new();
    assert!(c.send_close(t0));
    assert_eq!(c.ending(), Some(Ending::Closed(None)));

    let mut c = new();
    c.handle_error(Error::InvalidUtf8, t0);
    assert_eq!(
        c.ending(),
        Some(Ending::Failed(Some(CloseCode(1007)), Failure::Protocol))
    );

    // The memory budget's wait, and a keepalive, run out.
    let budget = Connection::new(
        Role::Server,
        timers().budget_wait(Some(SEC)).ping_interval(None),
        t0,
    );
    let mut c = budget;
    c.handle_budget_wait(t0);
    c.handle_timeout(t0 + 2 * SEC);
    assert_eq!(
        c.ending(),
        Some(Ending::Failed(
            Some(CloseCode(1013)),
            Failure::BudgetExhausted
        ))
    );
    let mut c = new();
    c.handle_timeout(t0 + 30 * SEC);
    c.handle_timeout(t0 + 41 * SEC);
    assert_eq!(c.phase(), Phase::TimedOut);
    assert_eq!(
        c.ending(),
        Some(Ending::Failed(
            Some(CloseCode(1011)),
            Failure::KeepaliveTimeout
        ))
    );

    // The transport ended first: no closing event.
    let mut c = new();
    c.handle_transport_end();
    assert_eq!(c.ending(), None);
}
