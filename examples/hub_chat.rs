//! The chat room of `examples/chat.rs` on a [`Hub`] and its topics: no
//! task per guest, each line published once to the room's topic and
//! written to every guest from one prepared frame.
//!
//! ```text
//! cargo run --example hub_chat -- 127.0.0.1:8080
//! cargo run --example hub_chat -- 127.0.0.1:8081 --redis redis://127.0.0.1:6379/
//! cargo run --example hub_chat -- 127.0.0.1:8082 --redis-cluster redis://127.0.0.1:7000,redis://127.0.0.1:7001
//! cargo run --features metrics --example hub_chat -- 127.0.0.1:8080 --metrics 127.0.0.1:9100
//! ```
//!
//! The handler serves the page (`GET /`) and upgrades `GET /ws`; every
//! guest subscribes to the room's topic as it opens. With `--redis URL`
//! the process's topics are linked through Redis
//! ([`Topics::link_redis`]) to every other server given the same URL (with
//! `--redis-cluster`, through a Redis Cluster's sharded pub/sub:
//! [`Topics::link_redis_cluster`]), and
//! the guests are told when the room splits (Redis unreachable: lines
//! reach only this server's guests) and when it is whole again. Built with
//! `--features metrics`, `--metrics ADDR` serves wavesock's metrics at
//! `http://ADDR/metrics` for Prometheus (`examples/grafana-dashboard.json`
//! charts them).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use wavesock::http::{Request, Response, StatusCode, header};
use wavesock::hub::{Closed, Handler, HttpResponse, Hub, HubConfig, HubMessage, Ws, respond};
use wavesock::topics::Topics;
use wavesock::topics::redis::{LinkState, RedisLink, RedisLinkConfig};

#[path = "support/metrics_args.rs"]
pub mod metrics_args;
#[path = "support/redis_args.rs"]
pub mod redis_args;
use redis_args::Redis;
use wavesock::{Config, Message, PreparedMessage};

const PAGE: &str = include_str!("chat.html");
const ROOM: &str = "room";
/// Chat lines are short; anything longer is a misbehaving client.
const MAX_CHAT_MESSAGE: usize = 4 << 10;

#[derive(Clone)]
struct Chat {
    /// This server's name, shown on the page and after guests' names.
    server: Arc<str>,
    topics: Topics,
    linked: bool,
    next_guest: Arc<AtomicU64>,
}

impl Chat {
    /// Says `line` to the whole room (every server's guests).
    fn say(&self, line: String) {
        if let Ok(msg) = PreparedMessage::new(&Message::text(line)) {
            self.topics.publish(ROOM, &msg);
        }
    }
}

impl Handler for Chat {
    /// The guest's name.
    type Data = String;

    fn upgrade(
        &mut self,
        request: &Request<()>,
        _: &mut Response<()>,
    ) -> Result<String, HttpResponse> {
        if request.uri().path() != "/ws" {
            return Err(respond(StatusCode::NOT_FOUND, "not found\n"));
        }
        let id = self.next_guest.fetch_add(1, Ordering::Relaxed);
        Ok(if self.linked {
            format!("guest {id}@{}", self.server)
        } else {
            format!("guest {id}")
        })
    }

    fn request(&mut self, request: &Request<()>) -> Option<HttpResponse> {
        match request.uri().path() {
            "/" => {}
            // Not an upgrade: the hub's own 426 or 400, as accept_async's.
            "/ws" => return None,
            _ => {
                let mut missing = Response::new(b"not found\n".to_vec());
                *missing.status_mut() = StatusCode::NOT_FOUND;
                return Some(missing);
            }
        }
        let page = PAGE.replace("{{SERVER}}", &html_escape(&self.server));
        Response::builder()
            .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
            .header(header::CACHE_CONTROL, "no-store")
            .body(page.into_bytes())
            .ok()
    }

    fn open(&mut self, ws: &mut Ws<'_, String>) {
        ws.subscribe(ROOM);
        let welcome = format!("welcome, you are {} on server {}", ws.data(), self.server);
        let _ = ws.send_text(&welcome);
        self.say(format!("{} joined", ws.data()));
    }

    fn message(&mut self, ws: &mut Ws<'_, String>, msg: HubMessage<'_>) {
        match msg {
            HubMessage::Text(text) => self.say(format!("{}: {text}", ws.data())),
            HubMessage::Binary(_) => {
                let _ = ws.send_text("binary messages are not chat: not sent");
            }
        }
    }

    fn close(&mut self, _: Closed, name: String) {
        self.say(format!("{name} left"));
    }
}

/// Enough escaping for text placed in HTML.
fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Tells this server's guests when the room splits and when it is whole
/// again, for as long as the link lives.
async fn watch_link(link: RedisLink, topics: Topics, server: Arc<str>) {
    let notice = |text: &str| {
        if let Ok(msg) = PreparedMessage::new(&Message::text(format!("* {text}"))) {
            topics.publish_local(ROOM, &msg);
        }
    };
    let mut status = link.status();
    let mut split = false;
    loop {
        let state = status.borrow_and_update().clone();
        match state {
            LinkState::Up => {
                eprintln!("{server}: joined the room through Redis");
                if split {
                    notice("the room is whole again: lines reach every server");
                    split = false;
                }
            }
            LinkState::Down(why) if !split => {
                eprintln!("{server}: room split ({why}), reconnecting to Redis");
                notice(
                    "the room is split: Redis is unreachable, so lines reach only this server's guests until it is back",
                );
                split = true;
            }
            _ => {}
        }
        if status.changed().await.is_err() {
            return;
        }
    }
}

/// Serves the chat on `listener`; with a Redis client, as one server of a
/// room shared with every server using the same Redis.
pub async fn serve(listener: TcpListener, redis: Option<Redis>) -> wavesock::Result<()> {
    let server: Arc<str> = listener.local_addr()?.to_string().into();
    // A registry of this room's own: tests run several rooms in one process.
    let topics = Topics::new();
    let linked = redis.is_some();
    if let Some(redis) = redis {
        let link = redis
            .link(
                &topics,
                RedisLinkConfig::default().prefix("wavesock-hub-chat:"),
            )
            .map_err(std::io::Error::other)?;
        tokio::spawn(watch_link(link, topics.clone(), server.clone()));
    }
    let chat = Chat {
        server,
        topics: topics.clone(),
        linked,
        next_guest: Arc::new(AtomicU64::new(1)),
    };
    let config = HubConfig::default()
        .config(
            Config::default()
                .max_frame_size(MAX_CHAT_MESSAGE)
                .max_message_size(MAX_CHAT_MESSAGE)
                // Closed tabs on sleeping laptops are noticed and dropped.
                .ping_interval(Some(Duration::from_secs(30))),
        )
        // One engine per worker thread.
        .engines(None)
        .topics(topics);
    let hub = Hub::new(chat, config)?;
    hub.serve(listener).await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut addr = "127.0.0.1:8080".to_string();
    let mut redis = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--metrics" {
            let Some(at) = args.next() else {
                eprintln!("--metrics needs an address");
                std::process::exit(2);
            };
            metrics_args::serve(&at)?;
        } else if arg == "--redis" || arg == "--redis-cluster" {
            match Redis::parse(&arg, args.next()) {
                Ok(r) => redis = Some(r),
                Err(e) => {
                    eprintln!("{e}");
                    eprintln!(
                        "usage: hub_chat [ADDR] [--redis redis://HOST:PORT/ | --redis-cluster redis://HOST:PORT[,redis://HOST:PORT...]] [--metrics ADDR]"
                    );
                    std::process::exit(2);
                }
            }
        } else {
            addr = arg;
        }
    }
    let listener = TcpListener::bind(&addr).await?;
    // Tooling reads the address from this line, as for the chat example.
    eprintln!("chat server on http://{}/", listener.local_addr()?);
    Ok(serve(listener, redis).await?)
}
