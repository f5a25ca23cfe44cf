//! How an engine hands publishes to its subscribers, with the engine
//! polled by hand (no time passes, nothing else runs): at most a turn's cap
//! of sends per poll, the rest in order at the next, and the engine asks to
//! be polled again meanwhile; what it has taken and not sent counts against
//! its inbox's bounds, and a close does not wait behind the backlog.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use tokio::io::{AsyncRead, DuplexStream, ReadBuf};
use wavesock::http::{Request, Response};
use wavesock::hub::{BackpressurePolicy, Handler, HttpResponse, Hub, HubMessage, Ws};
use wavesock::topics::{Topics, TopicsConfig};
use wavesock::{Config, Message, PreparedMessage};

/// Subscribes every connection to `t`.
#[derive(Clone)]
struct Subscriber;

impl Handler for Subscriber {
    type Data = ();

    fn upgrade(&mut self, _: &Request<()>, _: &mut Response<()>) -> Result<(), HttpResponse> {
        Ok(())
    }

    fn open(&mut self, ws: &mut Ws<'_, ()>) {
        ws.subscribe("t");
    }

    fn message(&mut self, _: &mut Ws<'_, ()>, _: HubMessage<'_>) {}
}

struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The text frames the server wrote so far (all small, unmasked).
fn frames(client: &mut DuplexStream, pending: &mut Vec<u8>) -> Vec<String> {
    let mut cx = Context::from_waker(Waker::noop());
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let mut rb = ReadBuf::new(&mut buf);
        match Pin::new(&mut *client).poll_read(&mut cx, &mut rb) {
            Poll::Ready(Ok(())) if !rb.filled().is_empty() => {
                pending.extend_from_slice(rb.filled());
            }
            _ => break,
        }
    }
    let mut out = Vec::new();
    while pending.len() >= 2 {
        assert_eq!(pending[0], 0x81, "a whole text frame");
        let len = usize::from(pending[1]);
        assert!(len < 126);
        if pending.len() < 2 + len {
            break;
        }
        out.push(String::from_utf8(pending[2..2 + len].to_vec()).unwrap());
        pending.drain(..2 + len);
    }
    out
}

#[tokio::test]
async fn an_engine_sends_at_most_its_cap_of_publishes_a_turn_and_the_rest_in_order_next() {
    const CAP: usize = 16 << 10;
    const CONNS: usize = 4;
    const PUBLISHES: usize = 6000;
    let topics = Topics::new();
    let config = crate::support::hub::defaults()
        .config(
            Config::default()
                .ping_interval(None)
                .max_backpressure(64 << 20),
        )
        .topics(topics.clone());
    let hub = Hub::new(Subscriber, config).unwrap();
    let adopter = hub.adopter();
    let mut clients = Vec::new();
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..CONNS {
        let (server, client) = tokio::io::duplex(1 << 20);
        let mut adopt = std::pin::pin!(adopter.adopt(server, ()));
        assert!(matches!(adopt.as_mut().poll(&mut cx), Poll::Ready(Ok(()))));
        clients.push((client, Vec::new()));
    }
    let woken = Arc::new(Flag(AtomicBool::new(false)));
    let waker = Waker::from(woken.clone());
    let mut engine = Box::pin(hub.run());
    let mut poll = || {
        woken.0.store(false, Ordering::SeqCst);
        let mut cx = Context::from_waker(&waker);
        assert!(engine.as_mut().poll(&mut cx).is_pending());
        woken.0.load(Ordering::SeqCst)
    };
    poll();
    assert_eq!(topics.subscribers("t"), CONNS);

    for i in 0..PUBLISHES {
        let msg = PreparedMessage::new(&Message::text(i.to_string())).unwrap();
        assert_eq!(topics.publish("t", &msg).local, CONNS);
    }
    let mut got: Vec<Vec<String>> = vec![Vec::new(); CONNS];
    let mut read = |got: &mut Vec<Vec<String>>| {
        for (n, (client, pending)) in clients.iter_mut().enumerate() {
            got[n].extend(frames(client, pending));
        }
        got.iter().map(Vec::len).sum::<usize>()
    };
    let again = poll();
    assert_eq!(read(&mut got), CAP, "one turn's sends");
    assert!(again, "the engine asks for another turn");
    let mut turns = 1;
    while read(&mut got) < CONNS * PUBLISHES {
        let again = poll();
        turns += 1;
        let sent = read(&mut got);
        assert!(sent <= turns * CAP, "more than the cap in a turn");
        assert!(again || sent == CONNS * PUBLISHES, "not woken at {sent}");
        assert!(turns < 10, "stuck at {sent}");
    }
    assert_eq!(turns, (CONNS * PUBLISHES).div_ceil(CAP));
    let expected: Vec<String> = (0..PUBLISHES).map(|i| i.to_string()).collect();
    for g in &got {
        assert_eq!(g, &expected, "every publish, in order");
    }
    // Nothing left: the engine rests.
    assert!(!poll());
}

/// Subscribes the connections adopted with `true` to `t`, closes any
/// connection that sends a message, and records why connections ended.
#[derive(Clone, Default)]
struct Closer {
    ended: Arc<std::sync::Mutex<Vec<Option<String>>>>,
}

impl Handler for Closer {
    type Data = bool;

    fn upgrade(&mut self, _: &Request<()>, _: &mut Response<()>) -> Result<bool, HttpResponse> {
        Ok(false)
    }

    fn open(&mut self, ws: &mut Ws<'_, bool>) {
        if *ws.data() {
            ws.subscribe("t");
        }
    }

    fn message(&mut self, ws: &mut Ws<'_, bool>, _: HubMessage<'_>) {
        ws.close(wavesock::CloseCode::NORMAL, "bye").unwrap();
    }

    fn close(&mut self, closed: wavesock::hub::Closed, _: bool) {
        let why = closed.error.map(|e| e.to_string());
        self.ended.lock().unwrap().push(why);
    }
}

/// A hub of one engine polled by hand, with `subscribers` adopted
/// connections subscribed to `t` and one more that is not.
struct Polled {
    topics: Topics,
    engine: Pin<Box<dyn Future<Output = ()>>>,
    subscribers: Vec<DuplexStream>,
    other: DuplexStream,
    ended: Arc<std::sync::Mutex<Vec<Option<String>>>>,
}

impl Polled {
    fn new(subscribers: usize, topics: TopicsConfig, policy: BackpressurePolicy) -> Self {
        let topics = Topics::with_config(topics);
        let config = crate::support::hub::defaults()
            .config(
                Config::default()
                    .ping_interval(None)
                    .max_backpressure(64 << 20),
            )
            .topics(topics.clone())
            .backpressure_policy(policy);
        let handler = Closer::default();
        let ended = handler.ended.clone();
        let hub = Hub::new(handler, config).unwrap();
        let adopter = hub.adopter();
        let mut cx = Context::from_waker(Waker::noop());
        let mut adopt = |subscribe| {
            let (server, client) = tokio::io::duplex(4 << 20);
            let mut adopt = std::pin::pin!(adopter.adopt(server, subscribe));
            assert!(matches!(adopt.as_mut().poll(&mut cx), Poll::Ready(Ok(()))));
            client
        };
        let subs = (0..subscribers).map(|_| adopt(true)).collect();
        let other = adopt(false);
        let mut polled = Polled {
            topics,
            engine: Box::pin(hub.run()),
            subscribers: subs,
            other,
            ended,
        };
        polled.poll();
        assert_eq!(polled.topics.subscribers("t"), subscribers);
        polled
    }

    fn poll(&mut self) {
        let mut cx = Context::from_waker(Waker::noop());
        assert!(self.engine.as_mut().poll(&mut cx).is_pending());
    }

    fn publish(&self, n: usize) -> usize {
        let msg = PreparedMessage::new(&Message::text("p")).unwrap();
        (0..n).map(|_| self.topics.publish("t", &msg).local).sum()
    }
}

/// Reads what the server wrote to `client` so far. (Within a test's task,
/// Tokio's cooperative budget would answer `Pending` after enough reads:
/// the tests that read many clients run `unconstrained`.)
fn written(client: &mut DuplexStream) -> Vec<u8> {
    let mut cx = Context::from_waker(Waker::noop());
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let mut rb = ReadBuf::new(&mut buf);
        match Pin::new(&mut *client).poll_read(&mut cx, &mut rb) {
            Poll::Ready(Ok(())) if !rb.filled().is_empty() => out.extend_from_slice(rb.filled()),
            _ => return out,
        }
    }
}

/// A masked text frame, as a client sends it.
fn client_text(text: &str) -> Vec<u8> {
    let mut out = vec![0x81, 0x80 | text.len() as u8, 0, 0, 0, 0];
    out.extend_from_slice(text.as_bytes());
    out
}

/// An engine with more to send than one turn's cap still sends the close
/// frames asked for in the turn: a close does not wait behind a backlog of
/// publishes (which, before, the publisher could make as long as it
/// liked).
#[tokio::test]
async fn a_close_goes_out_in_its_turn_behind_a_backlog_of_publishes() {
    tokio::task::unconstrained(async {
        const CAP: usize = 16 << 10;
        let mut hub = Polled::new(32, TopicsConfig::default(), BackpressurePolicy::Drop);
        // Three turns of sends.
        assert_eq!(hub.publish(3 * CAP / 32), 3 * CAP);
        {
            use tokio::io::AsyncWriteExt;
            hub.other.write_all(&client_text("close me")).await.unwrap();
        }
        hub.poll();
        let sent: usize = hub
            .subscribers
            .iter_mut()
            .map(|c| written(c).len() / 3)
            .sum();
        assert!(sent <= CAP, "one turn's cap: {sent}");
        let closed = written(&mut hub.other);
        assert_eq!(
            closed.first(),
            Some(&0x88),
            "the close frame, in its turn: {closed:?}"
        );
    })
    .await;
}

/// What an engine has taken from its inbox and not sent counts against the
/// inbox's bounds: a publisher faster than the engine makes it miss
/// publishes (counted) rather than queue without limit, and its
/// subscribers then meet the slow-subscriber policy: under `Close` they
/// are closed with `Error::PublishesMissed`, under `Drop` they go on.
#[tokio::test]
async fn an_engine_behind_its_inbox_bounds_misses_publishes_and_applies_the_policy() {
    tokio::task::unconstrained(async {
        const CAP: usize = 16 << 10;
        const SUBS: usize = 32;
        const PER_TURN: usize = CAP / SUBS;
        for policy in [BackpressurePolicy::Drop, BackpressurePolicy::Close] {
            let config = TopicsConfig::default().inbox_capacity(2 * PER_TURN);
            let mut hub = Polled::new(SUBS, config, policy);
            assert_eq!(hub.publish(2 * PER_TURN), 2 * PER_TURN * SUBS);
            // Takes both turns' worth, sends one.
            hub.poll();
            // One turn's worth of room: the rest is missed.
            assert_eq!(hub.publish(2 * PER_TURN), PER_TURN * SUBS, "{policy:?}");
            assert_eq!(hub.topics.stats().inbox_dropped, PER_TURN as u64);
            hub.poll();
            hub.poll();
            let ended = hub.ended.lock().unwrap().clone();
            match policy {
                BackpressurePolicy::Drop => {
                    assert!(ended.is_empty(), "{ended:?}");
                    // Every publish that fit reached every subscriber.
                    for c in &mut hub.subscribers {
                        assert_eq!(written(c).len() / 3, 3 * PER_TURN);
                    }
                }
                _ => {
                    // Each peer is told, after what reached it: close 1013.
                    for c in &mut hub.subscribers {
                        let got = written(c);
                        let close = got.iter().rposition(|&b| b == 0x88);
                        let close = close.expect("a close frame");
                        assert_eq!(&got[close + 2..close + 4], &1013u16.to_be_bytes());
                        // The peer answers.
                        use tokio::io::AsyncWriteExt;
                        c.write_all(&[0x88, 0x82, 0, 0, 0, 0, 0x03, 0xF5])
                            .await
                            .unwrap();
                    }
                    // Read, then ended.
                    for _ in 0..3 {
                        hub.poll();
                    }
                    let ended = hub.ended.lock().unwrap().clone();
                    assert_eq!(ended.len(), SUBS, "{ended:?}");
                    for why in &ended {
                        let why = why.as_deref().unwrap_or_default();
                        assert!(why.contains("missed"), "{why}");
                    }
                }
            }
        }
    })
    .await;
}
