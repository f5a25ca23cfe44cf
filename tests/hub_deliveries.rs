//! How an engine hands publishes to its subscribers, with the engine
//! polled by hand (no time passes, nothing else runs): at most a turn's cap
//! of sends per poll, the rest in order at the next, and the engine asks to
//! be polled again meanwhile.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use tokio::io::{AsyncRead, DuplexStream, ReadBuf};
use wavesock::http::{Request, Response};
use wavesock::hub::{Handler, HttpResponse, Hub, HubConfig, HubMessage, Ws};
use wavesock::topics::Topics;
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
    let config = HubConfig::default()
        .config(Config::default().ping_interval(None))
        .topics(topics.clone())
        .max_backpressure(64 << 20);
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
