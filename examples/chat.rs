//! A chat room in a browser: one port serves the page (`GET /`) and its
//! WebSocket endpoint (`GET /ws`). Every message a client sends is shown to
//! everyone, encoded once with `PreparedMessage` however many are connected.
//!
//! ```text
//! cargo run --example chat                    # http://127.0.0.1:8080/
//! cargo run --example chat -- 127.0.0.1:3000  # another address
//! cargo run --example chat -- 127.0.0.1:8081 --redis redis://127.0.0.1:6379/
//! cargo run --example chat -- 127.0.0.1:8082 --redis-cluster redis://127.0.0.1:7000,redis://127.0.0.1:7001
//! ```
//!
//! Open the page in two tabs and talk. The HTTP routing is done here, on
//! top of wavesock's handshake functions: the request head is read and
//! parsed once, and either answered as plain HTTP or upgraded, keeping any
//! bytes the browser sent after it.
//!
//! With `--redis URL`, several chat servers (processes, on one machine or
//! many) share one room through wavesock's Redis link
//! (`Topics::link_redis`; with `--redis-cluster`, a Redis Cluster's
//! sharded pub/sub, `Topics::link_redis_cluster`): a line is shown to the
//! server's own guests at
//! once and published through Redis to the others, encoded once per
//! process. While Redis is unreachable the room is split: each server's
//! guests hear only each other, are told so, and lines said meanwhile do
//! not reach the other servers. The link reconnects with jittered backoff.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use futures_util::StreamExt;
use http::{Method, Request, Response, StatusCode, header};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wavesock::handshake::server::{
    accept_response, check_request, error_response, parse_request, write_response,
};
use wavesock::topics::redis::{LinkState, RedisLink, RedisLinkConfig};

#[path = "support/redis_args.rs"]
pub mod redis_args;
use redis_args::Redis;
use wavesock::topics::{RecvError, Topics};
use wavesock::{Config, Message, PreparedMessage, Role, WebSocketStream};

const PAGE: &str = include_str!("chat.html");
/// Caps on the request head, as wavesock's own `accept_async` applies them.
const MAX_HEAD: usize = 8 << 10;
const MAX_HEADERS: usize = 64;
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Chat lines are short; anything longer is a misbehaving client.
const MAX_CHAT_MESSAGE: usize = 4 << 10;

/// The topic every guest subscribes to.
const ROOM: &str = "room";

/// One server's view of the room.
#[derive(Clone)]
struct Room {
    /// This server's name, shown on the page and after guests' names.
    server: Arc<str>,
    /// The room's topic lives here; with Redis, linked to every server's.
    topics: Topics,
    /// Whether other servers share the room (through Redis).
    linked: bool,
}

impl Room {
    /// Says `line` to the whole room: this server's guests at once, the
    /// other servers' through Redis while it is reachable.
    fn say(&self, line: String) {
        if let Some(msg) = prepare(line) {
            self.topics.publish(ROOM, &msg);
        }
    }

    /// Tells this server's guests only.
    fn notice(&self, line: String) {
        if let Some(msg) = prepare(line) {
            self.topics.publish_local(ROOM, &msg);
        }
    }

    /// A guest's name: with several servers, which one they are on too.
    fn guest(&self, id: u64) -> String {
        if self.linked {
            format!("guest {id}@{}", self.server)
        } else {
            format!("guest {id}")
        }
    }
}

/// A line from the server itself, not a guest.
fn system(text: &str) -> String {
    format!("* {text}")
}

/// Tells this server's guests when the room splits (Redis unreachable)
/// and when it is whole again, for as long as the link lives.
async fn watch_link(link: RedisLink, room: Room) {
    let mut status = link.status();
    let mut split = false;
    loop {
        let state = status.borrow_and_update().clone();
        match state {
            LinkState::Up => {
                eprintln!("{}: joined the room through Redis", room.server);
                if split {
                    room.notice(system("the room is whole again: lines reach every server"));
                    split = false;
                }
            }
            LinkState::Down(why) if !split => {
                eprintln!("{}: room split ({why}), reconnecting to Redis", room.server);
                room.notice(system(
                    "the room is split: Redis is unreachable, so lines reach only this server's guests until it is back",
                ));
                split = true;
            }
            _ => {}
        }
        if status.changed().await.is_err() {
            return;
        }
    }
}

/// Guests are numbered as they join.
static NEXT_GUEST: AtomicU64 = AtomicU64::new(1);

/// Reads until a whole request head is buffered; `None` if the client left
/// or sent more than `MAX_HEAD` without finishing it.
async fn read_head(tcp: &mut TcpStream, buf: &mut BytesMut) -> Option<(Request<()>, usize)> {
    loop {
        match parse_request(buf, MAX_HEADERS) {
            Ok(Some(parsed)) => return Some(parsed),
            Ok(None) if buf.len() < MAX_HEAD => {}
            Ok(None) | Err(_) => return None,
        }
        // Read no further than the cap, so a flood costs at most MAX_HEAD.
        let room = (MAX_HEAD - buf.len()) as u64;
        match (&mut *tcp).take(room).read_buf(buf).await {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

/// Writes a plain HTTP response and ends the connection.
async fn reply(tcp: TcpStream, status: StatusCode, content_type: &str, body: &str) {
    let mut resp = Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "no-store")
        .header(header::CONNECTION, "close")
        .body(())
        .expect("static header values are valid");
    if status == StatusCode::METHOD_NOT_ALLOWED {
        // RFC 9110 §15.5.6: every resource here is GET only.
        let allow = header::HeaderValue::from_static("GET");
        resp.headers_mut().insert(header::ALLOW, allow);
    }
    send_response(tcp, &resp, body.as_bytes()).await;
}

/// Writes a whole response and ends the connection.
async fn send_response(mut tcp: TcpStream, resp: &Response<()>, body: &[u8]) {
    let mut out = Vec::with_capacity(body.len() + 160);
    write_response(resp, body, &mut out);
    // The answer is best effort: a browser that left needs none.
    let _ = tcp.write_all(&out).await;
    let _ = tcp.shutdown().await;
}

/// Serves one TCP connection: the page, the WebSocket endpoint or an error.
async fn route(mut tcp: TcpStream, room: Room) -> wavesock::Result<()> {
    let mut buf = BytesMut::new();
    let Ok(Some((req, head_len))) =
        tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut tcp, &mut buf)).await
    else {
        reply(tcp, StatusCode::BAD_REQUEST, "text/plain", "bad request\n").await;
        return Ok(());
    };
    if req.method() != Method::GET {
        reply(
            tcp,
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET only\n",
        )
        .await;
        return Ok(());
    }
    match req.uri().path() {
        "/" => {
            let page = PAGE.replace("{{SERVER}}", &html_escape(&room.server));
            reply(tcp, StatusCode::OK, "text/html; charset=utf-8", &page).await;
            Ok(())
        }
        "/ws" => {
            let accept = match check_request(&req) {
                Ok(accept) => accept,
                Err(e) => {
                    // The same 400/405/426 answers accept_async would give,
                    // headers (Allow, Sec-WebSocket-Version) included.
                    let resp = error_response(&e).expect("request errors have a status");
                    let (head, body) = resp.into_parts();
                    send_response(tcp, &Response::from_parts(head, ()), &body).await;
                    return Ok(());
                }
            };
            let mut out = Vec::with_capacity(160);
            write_response(&accept_response(&accept), &[], &mut out);
            tcp.write_all(&out).await?;
            // Frames the browser sent right behind its request are kept.
            let early = buf.split_off(head_len);
            let config = Config::default()
                .max_frame_size(MAX_CHAT_MESSAGE)
                .max_message_size(MAX_CHAT_MESSAGE)
                // Closed tabs on sleeping laptops are noticed and dropped.
                .ping_interval(Some(Duration::from_secs(30)));
            let ws = WebSocketStream::from_partially_read(tcp, early, Role::Server, config)?;
            chat(ws, room, NEXT_GUEST.fetch_add(1, Ordering::Relaxed)).await
        }
        _ => {
            reply(tcp, StatusCode::NOT_FOUND, "text/plain", "not found\n").await;
            Ok(())
        }
    }
}

/// A line encoded once for every guest it goes to.
fn prepare(text: String) -> Option<PreparedMessage> {
    PreparedMessage::new(&Message::text(text))
        .map_err(|e| eprintln!("cannot prepare message: {e}"))
        .ok()
}

/// Enough escaping for text placed in HTML.
fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

async fn chat(ws: WebSocketStream<TcpStream>, room: Room, id: u64) -> wavesock::Result<()> {
    let (mut tx, mut rx) = ws.split();
    // A second handle on the same connection, for lines meant for this
    // client alone; the fan-out task sends through the first.
    let mut private = tx.clone();
    let mut inbox = room.topics.subscribe(ROOM);
    let name = room.guest(id);
    let fan_out = tokio::spawn(async move {
        loop {
            let first = match inbox.recv().await {
                Ok(m) => m,
                // A slow client misses lines rather than holding memory.
                Err(RecvError::Lagged(_)) => continue,
            };
            tx.feed_prepared(&first).await?;
            // Whatever else is already waiting goes out in the same write.
            while let Ok(Some(more)) = inbox.try_recv() {
                tx.feed_prepared(&more).await?;
            }
            tx.flush().await?;
        }
        // The loop ends only with a failed send; this names its type.
        #[allow(unreachable_code)]
        Ok::<(), wavesock::Error>(())
    });
    room.say(format!("{name} joined"));
    private
        .send(Message::text(format!(
            "welcome, you are guest {id} on server {}",
            room.server
        )))
        .await?;
    let mut result = Ok(());
    while let Some(msg) = rx.next().await {
        match msg {
            Ok(Message::Text(text)) => room.say(format!("{name}: {}", text.as_str())),
            Ok(Message::Binary(_)) => {
                let notice = Message::text("binary messages are not chat: not sent");
                if let Err(e) = private.send(notice).await {
                    result = Err(e);
                    break;
                }
            }
            Ok(_) => {} // pings are answered for us
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    fan_out.abort();
    room.say(format!("{name} left"));
    result
}

/// Serves the chat on `listener` until accepting fails, one process's room.
pub async fn serve(listener: TcpListener) -> std::io::Result<()> {
    serve_with(listener, None).await
}

/// Serves the chat on `listener`; with a Redis client, as one server of a
/// room shared with every server using the same Redis.
pub async fn serve_with(listener: TcpListener, redis: Option<Redis>) -> std::io::Result<()> {
    let server: Arc<str> = listener.local_addr()?.to_string().into();
    // A registry of this room's own: tests run several rooms in one process.
    let topics = Topics::new();
    let room = Room {
        server,
        topics: topics.clone(),
        linked: redis.is_some(),
    };
    if let Some(redis) = redis {
        let link = redis
            .link(&topics, RedisLinkConfig::default().prefix("wavesock-chat:"))
            .map_err(std::io::Error::other)?;
        tokio::spawn(watch_link(link, room.clone()));
    }
    loop {
        let (tcp, _) = listener.accept().await?;
        let room = room.clone();
        tokio::spawn(async move {
            if let Err(e) = route(tcp, room).await {
                eprintln!("connection ended: {e}");
            }
        });
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut addr = "127.0.0.1:8080".to_string();
    let mut redis = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--redis" || arg == "--redis-cluster" {
            match Redis::parse(&arg, args.next()) {
                Ok(r) => redis = Some(r),
                Err(e) => {
                    eprintln!("{e}");
                    eprintln!(
                        "usage: chat [ADDR] [--redis redis://HOST:PORT/ | --redis-cluster redis://HOST:PORT[,redis://HOST:PORT...]]"
                    );
                    std::process::exit(2);
                }
            }
        } else {
            addr = arg;
        }
    }
    let listener = TcpListener::bind(&addr).await?;
    // tests/browser/run.sh reads the address from this line.
    eprintln!("chat server on http://{}/", listener.local_addr()?);
    serve_with(listener, redis).await
}
