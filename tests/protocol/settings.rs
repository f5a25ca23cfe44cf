//! Settings at the edge of what they can hold: each is either refused by
//! `validate()` (and so by the constructor that takes it) with an error
//! that names it, or works. None panics later, when a channel, a buffer
//! or a timer is made from it.

use crate::support::redis as redis_server;

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use wavesock::http::{Request, Response};
use wavesock::hub::{Handler, HttpResponse, Hub, HubConfig, HubMessage, Ws};
use wavesock::topics::redis::{LinkError, RedisLink, RedisLinkConfig};
use wavesock::topics::{Topics, TopicsConfig};
use wavesock::{Config, Error, Message, PreparedMessage};

#[derive(Clone)]
struct Echo;

impl Handler for Echo {
    type Data = ();

    fn upgrade(&mut self, _: &Request<()>, _: &mut Response<()>) -> Result<(), HttpResponse> {
        Ok(())
    }

    fn message(&mut self, ws: &mut Ws<'_, ()>, msg: HubMessage<'_>) {
        let _ = ws.send_borrowed(msg);
    }
}

/// The `InvalidConfig` reason of `result`, which must be one.
fn refusal<T>(result: wavesock::Result<T>) -> &'static str {
    match result {
        Err(Error::InvalidConfig(reason)) => reason,
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("accepted"),
    }
}

#[tokio::test]
async fn a_handle_capacity_beyond_tokios_semaphore_is_refused() {
    // Tokio's channels hold at most `Semaphore::MAX_PERMITS`; one more used
    // to pass `validate` and panic in `Hub::new`.
    for capacity in [Semaphore::MAX_PERMITS + 1, usize::MAX] {
        let config = HubConfig::default().handle_capacity(capacity);
        let reason = refusal(Hub::new(Echo, config.clone()));
        assert!(reason.contains("handle_capacity"), "{reason}");
        let reason = refusal(config.validate());
        assert!(reason.contains("handle_capacity"), "{reason}");
    }
    // The largest Tokio takes works, with every other setting at its
    // largest too.
    let config = HubConfig::default()
        .handle_capacity(Semaphore::MAX_PERMITS)
        .shutdown_timeout(Duration::MAX)
        .config(
            Config::default()
                .max_headers(4096)
                .max_handshake_size(usize::MAX)
                .max_frame_size(usize::MAX)
                .max_message_size(usize::MAX)
                .max_backpressure(usize::MAX),
        );
    let hub = Hub::new(Echo, config).unwrap();
    let handle = hub.handle();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = tokio::spawn(hub.serve(listener));
    let (mut ws, _) = within(wavesock::connect_async(format!("ws://{addr}/")))
        .await
        .unwrap();
    ws.send(Message::text("x")).await.unwrap();
    assert_eq!(
        within(ws.next()).await.unwrap().unwrap(),
        Message::text("x")
    );
    handle.shutdown().await.unwrap();
    while let Some(Ok(_)) = within(ws.next()).await {}
    drop(ws);
    within(served).await.unwrap().unwrap();
}

#[tokio::test]
async fn a_read_buffer_too_large_to_allocate_is_refused() {
    // Reserved on the first read: `usize::MAX` used to pass `validate` and
    // panic in the engine ("capacity overflow").
    for bytes in [usize::MAX, isize::MAX as usize, (1 << 30) + 1] {
        let config = HubConfig::default().read_buffer_size(bytes);
        let reason = refusal(Hub::new(Echo, config));
        assert!(reason.contains("read_buffer_size"), "{reason}");
    }
    assert!(
        HubConfig::default()
            .read_buffer_size(1 << 30)
            .validate()
            .is_ok()
    );
}

#[tokio::test]
async fn more_headers_than_a_handshake_can_hold_are_refused_by_both_sides() {
    // Each parse of a head makes room for `max_headers` headers: a count
    // past what memory holds used to pass `validate` and panic ("capacity
    // overflow") in the middle of the handshake.
    let config = Config::default().max_headers(usize::MAX);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn({
        let config = config.clone();
        async move {
            let (tcp, _) = listener.accept().await.unwrap();
            wavesock::accept_async_with_config(tcp, config)
                .await
                .map(drop)
        }
    });
    // Each side refuses its settings before reading or writing anything.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let reason = refusal(
        wavesock::client_async_with_config(format!("ws://{addr}/"), tcp, config.clone()).await,
    );
    assert!(reason.contains("max_headers"), "{reason}");
    let reason = refusal(server.await.expect("the server task did not panic"));
    assert!(reason.contains("max_headers"), "{reason}");
    let reason = refusal(config.validate());
    assert!(reason.contains("max_headers"), "{reason}");
    assert!(Config::default().max_headers(4097).validate().is_err());

    // The most allowed works both ways.
    let config = Config::default().max_headers(4096);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn({
        let config = config.clone();
        async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut ws = wavesock::accept_async_with_config(tcp, config)
                .await
                .unwrap();
            while let Some(Ok(msg)) = ws.next().await {
                if msg.is_text() {
                    ws.send(msg).await.unwrap();
                }
            }
        }
    });
    let (mut ws, _) = wavesock::connect_async_with_config(format!("ws://{addr}/"), config)
        .await
        .unwrap();
    ws.send(Message::text("y")).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("y"));
    ws.close(None).await.unwrap();
    while ws.next().await.is_some() {}
    server.await.unwrap();
}

/// Why a link was refused; the test fails if it was made.
fn link_refusal(result: Result<RedisLink, LinkError>) -> String {
    match result {
        // Matched by its text, which names the setting.
        Err(e) => e.to_string(),
        Ok(_) => panic!("linked"),
    }
}

/// A client for an address nothing listens on: a link made with it keeps
/// trying to connect, which is all a refusal needs.
fn nowhere() -> wavesock::redis::Client {
    wavesock::redis::Client::open("redis://127.0.0.1:1/").unwrap()
}

#[tokio::test]
async fn a_redis_queue_beyond_tokios_semaphore_is_refused() {
    // The queue is a Tokio channel: `usize::MAX` (a public field) used to
    // panic in `link_redis`.
    for queue in [Semaphore::MAX_PERMITS + 1, usize::MAX] {
        let mut config = RedisLinkConfig::default();
        config.queue = queue;
        let reason = link_refusal(Topics::new().link_redis(nowhere(), config));
        assert!(reason.contains("queue"), "{reason}");
    }
}

#[tokio::test]
async fn redis_settings_that_cannot_work_are_refused() {
    type Spoil = fn(&mut RedisLinkConfig);
    let cases: [(&str, Spoil); 6] = [
        // A channel of no room panics in Tokio.
        ("queue", |c| c.queue = 0),
        // Taken as "every publisher is gone": publishing would stop.
        ("batch", |c| c.batch = 0),
        // A Tokio interval of zero panics.
        ("ping_interval", |c| c.ping_interval = Duration::ZERO),
        // Every connection attempt would time out at once.
        ("timeout", |c| c.timeout = Duration::ZERO),
        // Reconnecting in a busy loop while Redis is away.
        ("backoff_first", |c| c.backoff_first = Duration::ZERO),
        // No publish could arrive.
        ("max_message_size", |c| c.max_message_size = 0),
    ];
    for (name, spoil) in cases {
        let mut config = RedisLinkConfig::default();
        spoil(&mut config);
        let reason = link_refusal(Topics::new().link_redis(nowhere(), config));
        assert!(reason.contains(name), "{name}: {reason}");
    }
}

#[tokio::test]
async fn a_redis_link_at_the_largest_settings_carries_publishes() {
    // Each used to pass and then panic in the link's tasks once Redis was
    // up: a batch made room for up front ("capacity overflow"), a ping
    // interval and an unsubscribe delay added to `Instant::now()`. Their
    // tasks gone, nothing crossed.
    let Some(redis) = redis_server::RedisServer::start() else {
        return;
    };
    let config = || {
        let mut c = RedisLinkConfig::default()
            .ping_interval(Duration::MAX)
            .unsubscribe_delay(Duration::MAX)
            .timeout(Duration::MAX)
            .incoming_bytes(usize::MAX)
            .max_message_size(usize::MAX);
        c.backoff_first = Duration::MAX;
        c.backoff_max = Duration::MAX;
        c.batch = usize::MAX;
        c.queue = Semaphore::MAX_PERMITS;
        c
    };
    let client = || wavesock::redis::Client::open(redis.url()).unwrap();
    let (a, b) = (Topics::new(), Topics::new());
    let a_link = a.link_redis(client(), config()).unwrap();
    let b_link = b.link_redis(client(), config()).unwrap();
    let mut rx = b.subscribe("t");
    within(b_link.live("t")).await;
    within(async {
        while !a_link.is_up() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let msg = PreparedMessage::new(&Message::text("across")).unwrap();
    a.publish("t", &msg);
    assert_eq!(within(rx.recv()).await.unwrap(), msg);
    // The last subscriber goes: the channel is kept "for ever".
    drop(rx);
    let mut rx = b.subscribe("t");
    a.publish("t", &msg);
    assert_eq!(within(rx.recv()).await.unwrap(), msg);
    assert!(b_link.is_live("t"));
}

/// `fut`, which must finish within 10 s.
async fn within<F: Future>(fut: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .expect("timed out")
}

#[test]
fn topics_settings_set_directly_are_held_to_the_builders_bounds() {
    // The fields are public: the registry applies the bounds the builders
    // document instead of allocating `usize::MAX` shards.
    let mut config = TopicsConfig::default();
    config.shards = usize::MAX;
    config.inbox_capacity = 0;
    config.stream_capacity = 0;
    let topics = Topics::with_config(config);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut rx = topics.subscribe("t");
        let msg = PreparedMessage::new(&Message::text("kept")).unwrap();
        assert_eq!(topics.publish("t", &msg).local, 1);
        assert_eq!(rx.recv().await.unwrap(), msg);
    });
}
