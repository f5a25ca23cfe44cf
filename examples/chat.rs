//! A chat room in a browser: one port serves the page (`GET /`) and its
//! WebSocket endpoint (`GET /ws`). Every message a client sends is shown to
//! everyone, encoded once with `PreparedMessage` however many are connected.
//!
//! ```text
//! cargo run --example chat                    # http://127.0.0.1:8080/
//! cargo run --example chat -- 127.0.0.1:3000  # another address
//! ```
//!
//! Open the page in two tabs and talk. The HTTP routing is done here, on
//! top of wavesock's handshake functions: the request head is read and
//! parsed once, and either answered as plain HTTP or upgraded, keeping any
//! bytes the browser sent after it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use futures_util::StreamExt;
use http::{Method, Request, Response, StatusCode, header};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;
use wavesock::handshake::server::{
    accept_response, check_request, error_response, parse_request, write_response,
};
use wavesock::{Config, Message, PreparedMessage, Role, WebSocketStream};

const PAGE: &str = include_str!("chat.html");
/// Caps on the request head, as wavesock's own `accept_async` applies them.
const MAX_HEAD: usize = 8 << 10;
const MAX_HEADERS: usize = 64;
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Chat lines are short; anything longer is a misbehaving client.
const MAX_CHAT_MESSAGE: usize = 4 << 10;

type Hub = broadcast::Sender<PreparedMessage>;

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
async fn route(mut tcp: TcpStream, hub: Hub) -> wavesock::Result<()> {
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
            reply(tcp, StatusCode::OK, "text/html; charset=utf-8", PAGE).await;
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
            chat(ws, hub, NEXT_GUEST.fetch_add(1, Ordering::Relaxed)).await
        }
        _ => {
            reply(tcp, StatusCode::NOT_FOUND, "text/plain", "not found\n").await;
            Ok(())
        }
    }
}

/// Tells everyone, encoding the text once for all connections.
fn announce(hub: &Hub, text: String) {
    match PreparedMessage::new(&Message::text(text)) {
        // Err only means nobody is listening.
        Ok(prepared) => drop(hub.send(prepared)),
        Err(e) => eprintln!("cannot prepare message: {e}"),
    }
}

async fn chat(ws: WebSocketStream<TcpStream>, hub: Hub, id: u64) -> wavesock::Result<()> {
    let (mut tx, mut rx) = ws.split();
    // A second handle on the same connection, for lines meant for this
    // client alone; the fan-out task sends through the first.
    let mut private = tx.clone();
    let mut inbox = hub.subscribe();
    let fan_out = tokio::spawn(async move {
        loop {
            let first = match inbox.recv().await {
                Ok(m) => m,
                // A slow client misses lines rather than holding memory.
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return Ok::<_, wavesock::Error>(()),
            };
            tx.feed_prepared(&first).await?;
            // Whatever else is already waiting goes out in the same write.
            while let Ok(more) = inbox.try_recv() {
                tx.feed_prepared(&more).await?;
            }
            tx.flush().await?;
        }
    });
    announce(&hub, format!("guest {id} joined"));
    private
        .send(Message::text(format!("welcome, you are guest {id}")))
        .await?;
    let mut result = Ok(());
    while let Some(msg) = rx.next().await {
        match msg {
            Ok(Message::Text(text)) => announce(&hub, format!("guest {id}: {}", text.as_str())),
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
    announce(&hub, format!("guest {id} left"));
    result
}

/// Serves the chat on `listener` until accepting fails.
pub async fn serve(listener: TcpListener) -> std::io::Result<()> {
    let (hub, _) = broadcast::channel(256);
    loop {
        let (tcp, _) = listener.accept().await?;
        let hub = hub.clone();
        tokio::spawn(async move {
            if let Err(e) = route(tcp, hub).await {
                eprintln!("connection ended: {e}");
            }
        });
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".into());
    let listener = TcpListener::bind(&addr).await?;
    // tests/browser/run.sh reads the address from this line.
    eprintln!("chat server on http://{}/", listener.local_addr()?);
    serve(listener).await
}
