use std::collections::VecDeque;

use super::*;
use crate::proto::message::Message;

fn prepared(s: &str) -> PreparedMessage {
    PreparedMessage::new(&Message::text(s.to_owned())).unwrap()
}

/// The count an engine keeps for `topic`, if it is in it.
fn count(topics: &Topics, inbox: &Arc<Mailbox>, topic: &str) -> Option<Arc<AtomicUsize>> {
    let shard = topics.inner.shard(topic);
    let entry = shard.get(topic)?;
    let found = entry.engines.iter().find(|(i, _)| Arc::ptr_eq(i, inbox));
    found.map(|(_, c)| c.clone())
}

/// One more subscriber on the engine of `inbox`, as `hub::subs` does:
/// the registry hears of the first only.
fn add(topics: &Topics, inbox: &Arc<Mailbox>, topic: &str) {
    match count(topics, inbox, topic) {
        Some(c) => {
            c.fetch_add(1, Ordering::Relaxed);
        }
        None => {
            topics.join(inbox, topic);
        }
    }
}

/// One subscriber fewer; the registry hears of the last.
fn remove(topics: &Topics, inbox: &Arc<Mailbox>, topic: &str) {
    if let Some(c) = count(topics, inbox, topic) {
        if c.fetch_sub(1, Ordering::Relaxed) == 1 {
            topics.leave(inbox, topic);
        }
    }
}

#[test]
fn publish_queues_once_per_engine_in_order_and_counts_subscribers() {
    let topics = Topics::new();
    let a = topics.mailbox();
    let b = topics.mailbox();
    add(&topics, &a, "t");
    add(&topics, &a, "t");
    add(&topics, &b, "t");
    add(&topics, &b, "other");
    assert_eq!(topics.subscribers("t"), 3);
    for i in 0..3 {
        let p = topics.publish("t", &prepared(&i.to_string()));
        assert_eq!(p.local, 3);
        assert_eq!(p.remote, Remote::NoLink);
    }
    let mut got = VecDeque::new();
    a.take(&mut got, &mut Vec::new());
    let texts: Vec<_> = got.iter().map(|d| d.msg.payload().clone()).collect();
    assert_eq!(texts, ["0", "1", "2"]);
    assert!(got.iter().all(|d| &*d.topic == "t" && d.except.is_none()));
    got.clear();
    b.take(&mut got, &mut Vec::new());
    assert_eq!(got.len(), 3, "one delivery per engine, not per subscriber");
    assert_eq!(topics.publish("nobody", &prepared("x")).local, 0);
    assert_eq!(topics.stats().published, 4);
}

#[test]
fn the_publisher_is_left_out_on_its_own_engine_only() {
    let topics = Topics::new();
    let a = topics.mailbox();
    let b = topics.mailbox();
    add(&topics, &a, "t");
    add(&topics, &a, "t");
    add(&topics, &b, "t");
    let reached = topics.deliver("t", &prepared("x"), Some((a.id(), 7)));
    assert_eq!(reached, 2);
    let mut got = VecDeque::new();
    a.take(&mut got, &mut Vec::new());
    assert_eq!(got[0].except, Some((a.id(), 7)));
    got.clear();
    b.take(&mut got, &mut Vec::new());
    assert_eq!(got[0].except, None);
}

#[test]
fn removing_the_last_subscriber_forgets_the_topic() {
    let topics = Topics::new();
    let a = topics.mailbox();
    add(&topics, &a, "t");
    add(&topics, &a, "t");
    remove(&topics, &a, "t");
    assert_eq!(topics.names(), ["t"]);
    remove(&topics, &a, "t");
    assert!(topics.names().is_empty());
    assert_eq!(topics.publish("t", &prepared("x")).local, 0);
    let mut got = VecDeque::new();
    a.take(&mut got, &mut Vec::new());
    assert!(got.is_empty());
    // Removing again is harmless.
    remove(&topics, &a, "t");
    assert_eq!(topics.subscribers("t"), 0);
}

#[test]
fn a_full_inbox_misses_publishes_and_counts_them() {
    let topics = Topics::with_config(TopicsConfig::default().inbox_capacity(2));
    let a = topics.mailbox();
    let b = topics.mailbox();
    add(&topics, &a, "t");
    add(&topics, &b, "t");
    for i in 0..3 {
        topics.publish("t", &prepared(&i.to_string()));
        if i < 2 {
            // An engine that keeps up: takes and sends.
            let mut got = VecDeque::new();
            b.take(&mut got, &mut Vec::new());
            assert_eq!(got.len(), 1);
            b.sent(1, got[0].size());
        }
    }
    let mut got = VecDeque::new();
    a.take(&mut got, &mut Vec::new());
    assert_eq!(got.len(), 2, "the third did not fit");
    got.clear();
    b.take(&mut got, &mut Vec::new());
    assert_eq!(got.len(), 1, "the engine that kept up got it");
    assert_eq!(topics.stats().inbox_dropped, 1);
}

/// What an engine took and has not sent yet counts against its
/// inbox's bounds: an engine that takes every turn but sends less than
/// comes in misses publishes, rather than hold an unbounded backlog of
/// its own; the topics it missed are reported once each, and sending
/// makes room again.
#[test]
fn taken_publishes_count_against_the_bounds_until_sent() {
    for by_bytes in [false, true] {
        let config = if by_bytes {
            TopicsConfig::default().inbox_bytes(3 * (1 + 1))
        } else {
            TopicsConfig::default().inbox_capacity(3)
        };
        let topics = Topics::with_config(config);
        let a = topics.mailbox();
        add(&topics, &a, "t");
        add(&topics, &a, "u");
        let mut taken = VecDeque::new();
        let mut missed = Vec::new();
        for i in 0..3 {
            assert_eq!(topics.publish("t", &prepared(&i.to_string())).local, 1);
        }
        a.take(&mut taken, &mut missed);
        assert_eq!((taken.len(), missed.len()), (3, 0));
        // Taken, not sent: no room.
        assert_eq!(topics.publish("t", &prepared("3")).local, 0, "{by_bytes}");
        assert_eq!(topics.publish("u", &prepared("4")).local, 0, "{by_bytes}");
        assert_eq!(topics.publish("t", &prepared("5")).local, 0, "{by_bytes}");
        assert_eq!(topics.stats().inbox_dropped, 3);
        a.take(&mut taken, &mut missed);
        let missed_names: Vec<&str> = missed.iter().map(|(t, _)| &**t).collect();
        assert_eq!(missed_names, ["t", "u"], "each topic once");
        // Two sent: room for two.
        let d0 = taken.pop_front().unwrap();
        let d1 = taken.pop_front().unwrap();
        a.sent(2, d0.size() + d1.size());
        assert_eq!(topics.publish("t", &prepared("6")).local, 1);
        assert_eq!(topics.publish("t", &prepared("7")).local, 1);
        assert_eq!(topics.publish("t", &prepared("8")).local, 0);
        missed.clear();
        a.take(&mut taken, &mut missed);
        let left: Vec<_> = taken.iter().map(|d| d.msg.payload().clone()).collect();
        assert_eq!(left, ["2", "6", "7"]);
    }
}

#[tokio::test]
async fn receivers_get_every_publish_and_a_slow_one_skips_ahead() {
    let topics = Topics::with_config(TopicsConfig::default().stream_capacity(4));
    let mut fast = topics.subscribe("t");
    let mut slow = topics.subscribe("t");
    assert_eq!(fast.topic(), "t");
    for i in 0..6 {
        assert_eq!(topics.publish("t", &prepared(&i.to_string())).local, 2);
        assert_eq!(fast.recv().await.unwrap().payload(), &i.to_string());
    }
    assert_eq!(slow.recv().await, Err(RecvError::Lagged(2)));
    assert_eq!(slow.recv().await.unwrap().payload(), "2");
    assert_eq!(fast.try_recv(), Ok(None));
    drop(fast);
    assert_eq!(topics.names(), ["t"], "one receiver left");
    drop(slow);
    assert!(
        topics.names().is_empty(),
        "the entry goes with its last receiver"
    );
    assert_eq!(entries(&topics), 0);
    assert_eq!(topics.publish("t", &prepared("gone")).local, 0);
}

/// Entries in the registry's map, empty ones included: what the
/// public calls cannot tell apart from none.
fn entries(topics: &Topics) -> usize {
    let shards = topics.inner.shards.iter();
    shards.map(|s| s.lock().unwrap().len()).sum()
}

#[test]
fn a_registry_on_one_lock_or_many_behaves_the_same() {
    assert_eq!(TopicsConfig::default().shards(0).shards, 1);
    assert_eq!(TopicsConfig::default().shards(1 << 20).shards, 4096);
    for shards in [1, 3, 64] {
        let topics = Topics::with_config(TopicsConfig::default().shards(shards));
        assert_eq!(topics.inner.shards.len(), shards);
        let a = topics.mailbox();
        let mut rxs: Vec<_> = (0..20)
            .map(|t| topics.subscribe(&format!("t{t}")))
            .collect();
        for t in 0..20 {
            add(&topics, &a, &format!("t{t}"));
            assert_eq!(topics.publish(&format!("t{t}"), &prepared("x")).local, 2);
        }
        assert_eq!(topics.names().len(), 20);
        for rx in &mut rxs {
            assert_eq!(rx.try_recv().unwrap().unwrap().payload(), "x");
        }
    }
}

#[test]
fn settings_are_at_least_one_and_kept() {
    let config = TopicsConfig::default().stream_capacity(0).inbox_capacity(0);
    assert_eq!((config.stream_capacity, config.inbox_capacity), (1, 1));
    let config = TopicsConfig::default().stream_capacity(7).inbox_capacity(9);
    let topics = Topics::with_config(config);
    assert_eq!(topics.config().stream_capacity, 7);
    assert_eq!(topics.config().inbox_capacity, 9);
}

#[test]
fn taking_appends_after_what_the_engine_holds() {
    let topics = Topics::new();
    let a = topics.mailbox();
    add(&topics, &a, "t");
    let mut got = VecDeque::new();
    topics.publish("t", &prepared("0"));
    a.take(&mut got, &mut Vec::new());
    topics.publish("t", &prepared("1"));
    topics.publish("t", &prepared("2"));
    a.take(&mut got, &mut Vec::new());
    let texts: Vec<_> = got.iter().map(|d| d.msg.payload().clone()).collect();
    assert_eq!(texts, ["0", "1", "2"]);
    got.clear();
    a.take(&mut got, &mut Vec::new());
    assert!(got.is_empty(), "taken once");
}

#[test]
fn an_engine_is_woken_when_its_inbox_gets_its_first_publish() {
    use std::sync::atomic::AtomicUsize;
    use std::task::{Wake, Waker};
    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    let topics = Topics::new();
    let a = topics.mailbox();
    add(&topics, &a, "t");
    let count = Arc::new(Count(AtomicUsize::new(0)));
    a.register(&Waker::from(count.clone()));
    topics.publish("t", &prepared("0"));
    assert_eq!(count.0.load(Ordering::Relaxed), 1);
    // Nobody took the first yet: the engine knows already.
    a.register(&Waker::from(count.clone()));
    topics.publish("t", &prepared("1"));
    assert_eq!(count.0.load(Ordering::Relaxed), 1);
    a.take(&mut VecDeque::new(), &mut Vec::new());
    topics.publish("t", &prepared("2"));
    assert_eq!(count.0.load(Ordering::Relaxed), 2);
}

#[test]
fn subscribers_and_names_count_engines_and_receivers_together() {
    let topics = Topics::new();
    let a = topics.mailbox();
    add(&topics, &a, "t");
    add(&topics, &a, "t");
    let rx = topics.subscribe("t");
    assert_eq!(topics.subscribers("t"), 3);
    assert_eq!(topics.publish("t", &prepared("x")).local, 3);
    for name in ["e", "b", "d", "a", "c"] {
        add(&topics, &a, name);
    }
    assert_eq!(topics.names(), ["a", "b", "c", "d", "e", "t"]);
    remove(&topics, &a, "t");
    remove(&topics, &a, "t");
    assert_eq!(topics.subscribers("t"), 1, "the receiver keeps it");
    assert!(topics.names().contains(&"t".to_owned()));
    drop(rx);
    // Its ring went with it, and the entry too.
    assert!(!topics.names().contains(&"t".to_owned()));
    assert_eq!(topics.subscribers("t"), 0);
    assert_eq!(entries(&topics), 5);
    assert_eq!(topics.publish("t", &prepared("x")).local, 0);
}

#[test]
fn an_entry_goes_with_its_last_engine_subscriber() {
    let topics = Topics::new();
    let a = topics.mailbox();
    let b = topics.mailbox();
    add(&topics, &a, "t");
    add(&topics, &b, "t");
    remove(&topics, &a, "t");
    assert_eq!(entries(&topics), 1, "b still subscribes");
    assert_eq!(topics.publish("t", &prepared("x")).local, 1);
    remove(&topics, &b, "t");
    assert_eq!(entries(&topics), 0);
    // A receiver's entry stays while it lives, whatever engines do.
    let _rx = topics.subscribe("r");
    add(&topics, &a, "r");
    remove(&topics, &a, "r");
    assert_eq!(entries(&topics), 1);
    assert_eq!(topics.subscribers("r"), 1);
}

#[test]
fn a_lagging_receiver_is_told_by_try_recv_too() {
    let topics = Topics::with_config(TopicsConfig::default().stream_capacity(2));
    let mut rx = topics.subscribe("t");
    for i in 0..3 {
        topics.publish("t", &prepared(&i.to_string()));
    }
    assert_eq!(rx.try_recv(), Err(RecvError::Lagged(1)));
    assert_eq!(rx.try_recv().unwrap().unwrap().payload(), "1");
    assert_eq!(rx.try_recv().unwrap().unwrap().payload(), "2");
    assert_eq!(rx.try_recv(), Ok(None));
}

#[derive(Debug, Default)]
struct Recorder(Mutex<Vec<(String, PreparedMessage)>>, Mutex<Vec<String>>);

impl Link for Arc<Recorder> {
    fn send(&self, topic: &str, msg: &PreparedMessage) -> Remote {
        self.0.lock().unwrap().push((topic.to_owned(), msg.clone()));
        Remote::Queued
    }

    fn interest(&self, topic: &str) {
        self.1.lock().unwrap().push(topic.to_owned());
    }
}

#[test]
fn the_link_hears_when_a_topic_comes_and_goes_here_and_only_then() {
    let topics = Topics::new();
    let link = Arc::new(Recorder::default());
    topics.set_link(Box::new(link.clone()));
    let heard = || std::mem::take(&mut *link.1.lock().unwrap());
    let a = topics.mailbox();
    let b = topics.mailbox();
    add(&topics, &a, "t");
    assert_eq!(heard(), ["t"]);
    assert!(topics.has("t"));
    // More subscribers, on this engine, another, and a receiver: no news.
    add(&topics, &a, "t");
    add(&topics, &b, "t");
    let rx = topics.subscribe("t");
    remove(&topics, &a, "t");
    remove(&topics, &a, "t");
    remove(&topics, &b, "t");
    assert!(heard().is_empty());
    drop(rx);
    assert_eq!(heard(), ["t"]);
    assert!(!topics.has("t"));
    let rx = topics.subscribe("r");
    assert_eq!(heard(), ["r"]);
    drop(rx);
    assert_eq!(heard(), ["r"]);
}

/// Whether no lock of `topics` is held (by this thread: the tests
/// that ask run on one), and none of `streams` if given.
fn unlocked(topics: &Topics, streams: Option<&Streams>) -> bool {
    topics.inner.shards.iter().all(|s| s.try_lock().is_ok())
        && streams.is_none_or(|s| s.order.try_lock().is_ok())
}

/// A link that, when told of a topic, notes whether the registry holds
/// a lock (it must not: the link takes its own locks and reads the
/// registry back) and, if not, whether the topic has subscribers.
#[derive(Debug)]
struct Reader {
    topics: Topics,
    heard: Arc<Mutex<Vec<Heard>>>,
}

/// A topic the link heard of, whether no lock was held, and then
/// whether the topic had subscribers.
type Heard = (String, bool, Option<bool>);

impl Link for Reader {
    fn send(&self, _: &str, _: &PreparedMessage) -> Remote {
        Remote::Queued
    }

    fn interest(&self, topic: &str) {
        let free = unlocked(&self.topics, None);
        let has = free.then(|| self.topics.has(topic));
        self.heard
            .lock()
            .unwrap()
            .push((topic.to_owned(), free, has));
    }
}

#[test]
fn the_link_hears_of_a_topic_after_the_change_with_no_lock_held() {
    let topics = Topics::new();
    let heard = Arc::new(Mutex::new(Vec::new()));
    let reader = Reader {
        topics: topics.clone(),
        heard: heard.clone(),
    };
    topics.set_link(Box::new(reader));
    let heard = || std::mem::take(&mut *heard.lock().unwrap());
    let came = |t: &str| vec![(t.to_owned(), true, Some(true))];
    let went = |t: &str| vec![(t.to_owned(), true, Some(false))];
    // A receiver's topic, and a hub engine's.
    let rx = topics.subscribe("r");
    assert_eq!(heard(), came("r"));
    drop(rx);
    assert_eq!(heard(), went("r"));
    let a = topics.mailbox();
    topics.join(&a, "e");
    assert_eq!(heard(), came("e"));
    topics.leave(&a, "e");
    assert_eq!(heard(), went("e"));
}

#[test]
fn receivers_and_engines_are_woken_with_no_lock_held() {
    use std::task::{Context, Wake, Waker};
    /// Notes, when woken, whether a lock is held.
    struct Check {
        topics: Topics,
        streams: Option<Arc<Streams>>,
        woken: Mutex<Vec<bool>>,
    }
    impl Wake for Check {
        fn wake(self: Arc<Self>) {
            let free = unlocked(&self.topics, self.streams.as_deref());
            self.woken.lock().unwrap().push(free);
        }
    }
    let topics = Topics::new();
    let mut rx = topics.subscribe("t");
    let a = topics.mailbox();
    topics.join(&a, "t");
    let on_rx = Arc::new(Check {
        topics: topics.clone(),
        streams: Some(rx.streams.clone()),
        woken: Mutex::default(),
    });
    let on_engine = Arc::new(Check {
        topics: topics.clone(),
        streams: Some(rx.streams.clone()),
        woken: Mutex::default(),
    });
    a.register(&Waker::from(on_engine.clone()));
    {
        let waker = Waker::from(on_rx.clone());
        let mut recv = Box::pin(rx.recv());
        let pending = recv.as_mut().poll(&mut Context::from_waker(&waker));
        assert!(pending.is_pending());
        assert_eq!(topics.publish("t", &prepared("x")).local, 2);
    }
    assert_eq!(*on_rx.woken.lock().unwrap(), [true], "the receiver");
    assert_eq!(*on_engine.woken.lock().unwrap(), [true], "the engine");
}
#[test]
fn a_link_gets_every_publish_but_not_what_it_delivers() {
    let topics = Topics::new();
    let link = Arc::new(Recorder::default());
    assert!(topics.set_link(Box::new(link.clone())));
    assert!(!topics.set_link(Box::new(link.clone())), "one link");
    let mut rx = topics.subscribe("t");
    let p = topics.publish("t", &prepared("out"));
    assert_eq!((p.local, p.remote), (1, Remote::Queued));
    // Nobody here subscribes: it still goes to the other servers.
    let p = topics.publish("nobody", &prepared("far"));
    assert_eq!((p.local, p.remote), (0, Remote::Queued));
    // What came from the link goes to this process only.
    assert_eq!(topics.deliver("t", &prepared("in"), None), 1);
    let sent: Vec<_> = link
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|(t, m)| (t.clone(), m.payload().clone()))
        .collect();
    assert_eq!(
        sent,
        [
            ("t".to_owned(), "out".into()),
            ("nobody".to_owned(), "far".into())
        ]
    );
    assert_eq!(rx.try_recv().unwrap().unwrap().payload(), "out");
    assert_eq!(rx.try_recv().unwrap().unwrap().payload(), "in");
    assert_eq!(topics.stats().published, 3);
}

#[test]
fn an_inbox_full_of_bytes_misses_publishes_but_always_takes_one() {
    let config = TopicsConfig::default().inbox_bytes(20);
    let topics = Topics::with_config(config);
    let a = topics.mailbox();
    add(&topics, &a, "t");
    // 1 byte of topic and 8 of payload each: two fit in 20, not three.
    for i in 0..3 {
        topics.publish("t", &prepared(&format!("{i:08}")));
    }
    assert_eq!(topics.stats().inbox_dropped, 1);
    let mut got = VecDeque::new();
    a.take(&mut got, &mut Vec::new());
    assert_eq!(got.len(), 2);
    // Taken and sent: room again. A publish larger than the bound fits
    // alone.
    a.sent(2, got.iter().map(Delivery::size).sum());
    topics.publish("t", &prepared(&"x".repeat(100)));
    topics.publish("t", &prepared("y"));
    got.clear();
    a.take(&mut got, &mut Vec::new());
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].msg.payload().len(), 100);
    assert_eq!(topics.stats().inbox_dropped, 2);
}

#[test]
fn an_engine_takes_the_registry_lock_only_for_its_first_and_last_subscriber() {
    let topics = Topics::new();
    let a = topics.mailbox();
    let locks = || topics.inner.locks.load(Ordering::Relaxed);
    let (count, _) = topics.join(&a, "t");
    let before = locks();
    // What `hub::subs` does for the second to fifth subscriber.
    for _ in 0..4 {
        count.fetch_add(1, Ordering::Relaxed);
        let _ = topics.now();
    }
    assert_eq!(locks(), before, "no lock for subscribers 2 to 5");
    assert_eq!(topics.subscribers("t"), 5);
    assert_eq!(topics.publish("t", &prepared("x")).local, 5);
    count.fetch_sub(4, Ordering::Relaxed);
    assert_eq!(topics.subscribers("t"), 1);
    topics.leave(&a, "t");
    assert_eq!(entries(&topics), 0);
}

#[test]
fn engines_and_receivers_see_one_order_per_topic_under_concurrent_publishers() {
    let topics = Topics::with_config(TopicsConfig::default().stream_capacity(1 << 14));
    let a = topics.mailbox();
    add(&topics, &a, "t");
    let mut rx = topics.subscribe("t");
    let threads: Vec<_> = (0..4)
        .map(|n| {
            let topics = topics.clone();
            std::thread::spawn(move || {
                for i in 0..500 {
                    topics.publish("t", &prepared(&format!("{n}.{i}")));
                    // Other topics, in other shards, meanwhile.
                    topics.publish(&format!("other{i}"), &prepared("-"));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut by_engine = VecDeque::new();
    a.take(&mut by_engine, &mut Vec::new());
    let by_engine: Vec<_> = by_engine.iter().map(|d| d.msg.payload().clone()).collect();
    let mut by_receiver = Vec::new();
    while let Ok(Some(m)) = rx.try_recv() {
        by_receiver.push(m.payload().clone());
    }
    assert_eq!(by_engine.len(), 2000);
    assert_eq!(by_receiver, by_engine);
}

#[test]
fn the_global_registry_is_one() {
    assert!(Topics::global().same(&Topics::global()));
    assert!(!Topics::new().same(&Topics::new()));
}
