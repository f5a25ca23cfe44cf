//! Topics on hubs over real loopback sockets: subscribe, publish from
//! handlers and handles, one order per topic, hubs sharing a registry.

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use wavesock::http::{Request, Response};
use wavesock::hub::{Handler, Hub, HubConfig, HubHandle, HubMessage, Ws};
use wavesock::topics::Topics;
use wavesock::{ErrorResponse, Message, PreparedMessage, WebSocketStream};

type Client = WebSocketStream<wavesock::MaybeTlsStream<TcpStream>>;

/// `sub T` subscribes, `unsub T` unsubscribes, `pub T text` publishes
/// (to the others), and each answers `ok` once done.
#[derive(Clone)]
struct Commands;

impl Handler for Commands {
    type Data = ();

    fn upgrade(&mut self, _: &Request<()>, _: &mut Response<()>) -> Result<(), ErrorResponse> {
        Ok(())
    }

    fn message(&mut self, ws: &mut Ws<'_, ()>, msg: HubMessage<'_>) {
        let HubMessage::Text(t) = msg else { return };
        let mut words = t.splitn(3, ' ');
        match (words.next(), words.next(), words.next()) {
            (Some("sub"), Some(topic), None) => {
                ws.subscribe(topic);
            }
            (Some("unsub"), Some(topic), None) => {
                ws.unsubscribe(topic);
            }
            (Some("pub"), Some(topic), Some(text)) => {
                ws.publish(topic, HubMessage::Text(text));
            }
            _ => return,
        }
        ws.send_text("ok").unwrap();
    }
}

async fn serve(topics: &Topics) -> (SocketAddr, HubHandle) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hub = Hub::new(Commands, HubConfig::default().topics(topics.clone())).unwrap();
    let handle = hub.handle();
    tokio::spawn(hub.serve(listener));
    (addr, handle)
}

async fn client(addr: SocketAddr) -> Client {
    wavesock::connect_async(format!("ws://{addr}/"))
        .await
        .unwrap()
        .0
}

async fn say(ws: &mut Client, line: &str) {
    ws.send(Message::text(line.to_owned())).await.unwrap();
    assert_eq!(next_text(ws).await, "ok");
}

async fn next_text(ws: &mut Client) -> String {
    let msg = tokio::time::timeout(Duration::from_secs(10), ws.next())
        .await
        .expect("a message within 10 s")
        .expect("open")
        .unwrap();
    msg.to_text().unwrap().to_owned()
}

#[tokio::test]
async fn publishes_reach_subscribers_on_every_hub_of_the_registry_but_the_publisher() {
    let topics = Topics::new();
    let (a, handle_a) = serve(&topics).await;
    let (b, _handle_b) = serve(&topics).await;
    let mut on_a = client(a).await;
    let mut on_b = client(b).await;
    let mut publisher = client(a).await;
    let mut bystander = client(b).await;
    say(&mut on_a, "sub news").await;
    say(&mut on_b, "sub news").await;
    say(&mut publisher, "sub news").await;
    say(&mut bystander, "sub other").await;
    assert_eq!(topics.subscribers("news"), 3);

    say(&mut publisher, "pub news one").await;
    let two = PreparedMessage::new(&Message::text("two")).unwrap();
    assert_eq!(handle_a.publish("news", &two).local, 3);
    for ws in [&mut on_a, &mut on_b] {
        assert_eq!(next_text(ws).await, "one");
        assert_eq!(next_text(ws).await, "two");
    }
    // The publisher heard the handle's publish, not its own.
    assert_eq!(next_text(&mut publisher).await, "two");

    say(&mut on_b, "unsub news").await;
    drop(on_a);
    // The closed one leaves the registry when its engine sees it go.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while topics.subscribers("news") != 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still {}",
            topics.subscribers("news")
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    handle_a.publish(
        "news",
        &PreparedMessage::new(&Message::text("three")).unwrap(),
    );
    assert_eq!(next_text(&mut publisher).await, "three");
    say(&mut bystander, "pub other fin").await;
    say(&mut on_b, "sub other").await;
    handle_a.publish(
        "other",
        &PreparedMessage::new(&Message::text("last")).unwrap(),
    );
    assert_eq!(
        next_text(&mut on_b).await,
        "last",
        "nothing from news after unsub"
    );
    assert_eq!(next_text(&mut bystander).await, "last");
}
