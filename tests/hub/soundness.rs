//! Soundness under a memory budget and topics, over real loopback
//! sockets, on the engines where each shows: a quiet client is not refused
//! for having waited for budget once, a subscriber is not closed for
//! publishes that were never for it, and small messages never touch the
//! budget's shared counter.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::support::raw;

use raw::{budget_config, frame, read_frame, until, upgrade_raw, within};
use wavesock::hub::{Closed, Handler, Hub, HubMessage, Readiness, Ws};
use wavesock::proto::budget::{BudgetAccount, Grant, Held};
use wavesock::topics::{Topics, TopicsConfig};
use wavesock::{Config, MemoryBudget, Message, OpCode, PreparedMessage};

/// Under a budget with no allowance, a read into the Stream's stack (or
/// the hub's shared buffer) first sets aside room in the budget, and waits
/// when the budget is full, which starts the core's budget wait. Once
/// budget comes back and the read finds nothing, a client that holds
/// nothing is no longer waiting: it is not closed with 1013 however long
/// it stays quiet.
#[tokio::test]
async fn a_quiet_client_that_once_found_the_budget_full_is_not_refused_later() {
    let wait = Duration::from_millis(800);
    let budget = MemoryBudget::new(1 << 20).allowance(0).wait_timeout(wait);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = budget_config(&budget);
    let held = budget.clone();
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut ws = wavesock::accept_async_with_config(tcp, config)
            .await
            .unwrap();
        while let Some(m) = ws.next().await {
            let m = m.map_err(|e| e.to_string())?;
            if m.as_text() == Some("hold") {
                // Others take all the budget for a moment, while this
                // connection goes back to reading.
                let mut hog = BudgetAccount::new(Some(held.clone()));
                assert_eq!(
                    hog.try_set(Held::Fragments, held.available()),
                    Grant::Granted
                );
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    hog.release_all();
                });
            }
            if m.is_data() {
                ws.send(m).await.map_err(|e| e.to_string())?;
            }
        }
        Ok::<(), String>(())
    });
    let mut c = upgrade_raw(addr).await;
    c.write_all(&frame(true, OpCode::Text, b"hold".to_vec()))
        .await
        .unwrap();
    assert_eq!(next_frame(&mut c).await, Some((0x1, "hold".to_owned())));
    until(|| budget.in_use() == 0).await;
    // Quiet, holding nothing, for longer than the wait; then a request.
    tokio::time::sleep(wait * 2).await;
    let _ = c
        .write_all(&frame(true, OpCode::Text, b"again".to_vec()))
        .await;
    let answer = next_frame(&mut c).await;
    assert_eq!(
        answer,
        Some((0x1, "again".to_owned())),
        "the quiet client was refused: server {:?}",
        within(5, server).await.unwrap()
    );
}

/// The next server frame (its payload as text), `None` at the end.
async fn next_frame(tcp: &mut tokio::net::TcpStream) -> Option<(u8, String)> {
    use tokio::io::AsyncReadExt;
    let mut head = [0u8; 2];
    within(10, tcp.read_exact(&mut head)).await.ok()?;
    let len = match head[1] & 0x7f {
        126 => tcp.read_u16().await.ok()? as usize,
        127 => tcp.read_u64().await.ok()? as usize,
        n => n as usize,
    };
    let mut payload = vec![0u8; len];
    within(10, tcp.read_exact(&mut payload)).await.ok()?;
    Some((
        head[0] & 0x0f,
        String::from_utf8_lossy(&payload).into_owned(),
    ))
}

/// Topic commands: `sub` subscribes to `t` and answers `ok`; `pub2`
/// publishes `a` then `b` to `t` through the registry; anything else is
/// echoed. Reports each end.
#[derive(Clone)]
struct TopicsHandler(mpsc::UnboundedSender<Option<String>>);

impl Handler for TopicsHandler {
    type Data = ();

    fn upgrade(
        &mut self,
        _: &wavesock::http::Request<()>,
        _: &mut wavesock::http::Response<()>,
    ) -> Result<(), wavesock::hub::HttpResponse> {
        Ok(())
    }

    fn message(&mut self, ws: &mut Ws<'_, ()>, msg: HubMessage<'_>) {
        match msg {
            HubMessage::Text("sub") => {
                ws.subscribe("t");
                let _ = ws.send_text("ok");
            }
            HubMessage::Text("pub2") => {
                for m in ["a", "b"] {
                    let prepared = PreparedMessage::new(&Message::text(m)).unwrap();
                    ws.registry().publish("t", &prepared);
                }
            }
            other => {
                let _ = ws.send_borrowed(other);
            }
        }
    }

    fn close(&mut self, closed: Closed, _: ()) {
        let _ = self.0.send(closed.error.map(|e| e.to_string()));
    }
}

/// A publish an engine's inbox had no room for closes (under the default
/// `Close` policy) the engine's subscribers to its topic: those that were
/// subscribed when it was published, and missed it. A connection that
/// subscribed after it (here in the same turn, right after the publish
/// that did not fit) would never have been sent it: it missed nothing and
/// must not be closed. Now every subscriber of the topic at the time the
/// engine takes its inbox is closed with `PublishesMissed`.
#[tokio::test]
async fn a_subscriber_that_came_after_a_missed_publish_is_not_closed() {
    for readiness in [Readiness::Owned, Readiness::Tokio] {
        eprintln!("readiness {readiness:?}");
        let topics = Topics::with_config(TopicsConfig::default().inbox_capacity(1));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, mut ended) = mpsc::unbounded_channel();
        let config = crate::support::hub::defaults()
            .engines(Some(1))
            .readiness(readiness)
            .topics(topics);
        let hub = Hub::new(TopicsHandler(tx), config).unwrap();
        tokio::spawn(hub.serve(listener));
        // S subscribes first: the engine's inbox gets what `t` is sent.
        let mut s = upgrade_raw(addr).await;
        s.write_all(&frame(true, OpCode::Text, b"sub".to_vec()))
            .await
            .unwrap();
        assert_eq!(read_frame(&mut s).await, (0x1, b"ok".to_vec()));
        // X: two publishes in one turn (the second finds the inbox full),
        // then X subscribes; X then asks for an echo.
        let mut x = upgrade_raw(addr).await;
        let mut burst = frame(true, OpCode::Text, b"pub2".to_vec());
        burst.extend(frame(true, OpCode::Text, b"sub".to_vec()));
        x.write_all(&burst).await.unwrap();
        let ok = next_frame(&mut x).await;
        let _ = x
            .write_all(&frame(true, OpCode::Text, b"echo".to_vec()))
            .await;
        let echo = next_frame(&mut x).await;
        assert_eq!(
            (ok, echo),
            (Some((0x1, "ok".to_owned())), Some((0x1, "echo".to_owned()))),
            "{readiness:?}: X, subscribed after the missed publish, was closed: {:?}",
            ended.recv().await
        );
        drop((s, x));
    }
}

/// Echoes data messages on a hub; reports nothing.
#[derive(Clone)]
struct HubEcho;

impl Handler for HubEcho {
    type Data = ();

    fn upgrade(
        &mut self,
        _: &wavesock::http::Request<()>,
        _: &mut wavesock::http::Response<()>,
    ) -> Result<(), wavesock::hub::HttpResponse> {
        Ok(())
    }

    fn message(&mut self, ws: &mut Ws<'_, ()>, msg: HubMessage<'_>) {
        let _ = ws.send_borrowed(msg);
    }
}

/// The budget's allowance (128 KiB by default) is there so that
/// "connections exchanging small messages never touch the shared counter"
/// (`DEFAULT_ALLOWANCE`): a small echo costs the budget nothing. A hub read
/// into the engine's shared buffer (512 KiB) sets aside room under the
/// budget only within what is left of the allowance, so the budget's peak
/// stays 0.
#[tokio::test]
async fn small_messages_on_the_hub_never_touch_the_shared_budget() {
    for readiness in [Readiness::Owned, Readiness::Tokio] {
        let budget = MemoryBudget::new(64 << 20);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let config = crate::support::hub::defaults()
            .engines(Some(1))
            .readiness(readiness)
            .config(Config::default().memory_budget(budget.clone()));
        let hub = Hub::new(HubEcho, config).unwrap();
        tokio::spawn(hub.serve(listener));
        let mut c = upgrade_raw(addr).await;
        for _ in 0..3 {
            c.write_all(&frame(true, OpCode::Text, b"hi".to_vec()))
                .await
                .unwrap();
            assert_eq!(next_frame(&mut c).await, Some((0x1, "hi".to_owned())));
        }
        assert_eq!(
            budget.peak(),
            0,
            "{readiness:?}: a small echo took from the shared budget"
        );
    }
}
