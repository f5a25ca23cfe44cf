//! The one server handshake (`Accepting`) on real loopback sockets: the
//! same handcrafted requests to every server (the Stream's
//! `accept_hdr_async` and `accept_async_callback`, hyper's
//! `upgrade_hdr_with_config`, the axum extractor and the hub), with and
//! without the server's permessage-deflate, and what each answers; then a
//! frame after the handshake to see whether the connection runs what the
//! response said. (From a break-it round on the change that made the four
//! accept sequences one.)
// Callbacks return tungstenite's shape, `Result<Response, ErrorResponse>`.
#![allow(clippy::result_large_err)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;
use wavesock::handshake::server::{ErrorResponse, Request, Response};
use wavesock::hub::{Handler, HttpResponse, Hub, HubConfig, HubMessage, Ws};
use wavesock::{Callback, Config, Subprotocols};

use crate::support::hosts::{HOST_CASES, upgrade_with_hosts};

const LIMIT: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Stream,
    StreamAsync,
    Hyper,
    Axum,
    Hub,
}

pub const KINDS: [Kind; 5] = [
    Kind::Stream,
    Kind::StreamAsync,
    Kind::Hyper,
    Kind::Axum,
    Kind::Hub,
];

fn config(deflate: bool) -> Config {
    let config = Config::default();
    #[cfg(feature = "deflate")]
    let config = if deflate {
        config.deflate(wavesock::DeflateConfig::default())
    } else {
        config
    };
    #[cfg(not(feature = "deflate"))]
    let _ = deflate;
    config
}

/// What every callback does, by the request's `x-cb` header.
fn amend(req: &Request, mut resp: Response) -> Result<Response, ErrorResponse> {
    let mode = req
        .headers()
        .get("x-cb")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let h = resp.headers_mut();
    match mode.as_str() {
        "forge" => {
            *resp.status_mut() = http::StatusCode::OK;
            let h = resp.headers_mut();
            h.insert("sec-websocket-accept", "forged".parse().unwrap());
            h.insert(
                "sec-websocket-extensions",
                "permessage-deflate".parse().unwrap(),
            );
            h.insert("upgrade", "h2c".parse().unwrap());
            h.insert("connection", "keep-alive".parse().unwrap());
            h.insert("x-added", "yes".parse().unwrap());
            Ok(resp)
        }
        "forge-ext" => {
            h.insert(
                "sec-websocket-extensions",
                "permessage-deflate; client_max_window_bits=9"
                    .parse()
                    .unwrap(),
            );
            Ok(resp)
        }
        "status" => {
            *resp.status_mut() = http::StatusCode::FORBIDDEN;
            Ok(resp)
        }
        "refuse" => {
            let mut r = http::Response::new(Some("nope\n".to_owned()));
            *r.status_mut() = http::StatusCode::FORBIDDEN;
            r.headers_mut().insert("x-refused", "1".parse().unwrap());
            Err(r)
        }
        "proto" => Subprotocols::new(["chat", "superchat"]).on_request(req, resp),
        _ => Ok(resp),
    }
}

async fn echo<S: AsyncRead + AsyncWrite + Unpin>(mut ws: wavesock::WebSocketStream<S>) {
    while let Some(Ok(msg)) = ws.next().await {
        if msg.is_data() && ws.send(msg).await.is_err() {
            break;
        }
    }
}

#[derive(Clone)]
struct HubEcho;

impl Handler for HubEcho {
    type Data = ();

    fn upgrade(
        &mut self,
        request: &http::Request<()>,
        response: &mut http::Response<()>,
    ) -> Result<(), HttpResponse> {
        match amend(request, response.clone()) {
            Ok(r) => {
                *response = r;
                Ok(())
            }
            Err(refusal) => {
                let (parts, body) = refusal.into_parts();
                Err(http::Response::from_parts(
                    parts,
                    body.unwrap_or_default().into_bytes(),
                ))
            }
        }
    }

    fn message(&mut self, ws: &mut Ws<'_, ()>, msg: HubMessage<'_>) {
        let _ = ws.send_borrowed(msg);
    }
}

async fn hyper_handle(
    mut req: http::Request<Incoming>,
    deflate: bool,
) -> Result<http::Response<wavesock::upgrade::Body>, Infallible> {
    let mode = req.headers().get("x-cb").cloned();
    let callback = move |r: &Request, resp: Response| {
        let mut r2 = http::Request::new(());
        *r2.headers_mut() = r.headers().clone();
        if let Some(m) = &mode {
            r2.headers_mut().insert("x-cb", m.clone());
        }
        amend(&r2, resp)
    };
    match wavesock::upgrade::upgrade_hdr_with_config(&mut req, callback, config(deflate)) {
        Ok((resp, fut)) => {
            tokio::spawn(async move {
                if let Ok(ws) = fut.await {
                    echo(ws).await;
                }
            });
            Ok(resp)
        }
        Err(refusal) => Ok(refusal.into_response()),
    }
}

async fn axum_handler(
    ws: wavesock::axum::WebSocketUpgrade,
    axum::extract::State(deflate): axum::extract::State<bool>,
) -> axum::response::Response {
    ws.config(config(deflate))
        .protocols(["chat", "superchat"])
        .on_upgrade(|mut socket| async move {
            while let Some(Ok(msg)) = socket.recv().await {
                if let m @ (wavesock::axum::Message::Text(_) | wavesock::axum::Message::Binary(_)) =
                    msg
                    && socket.send(m).await.is_err()
                {
                    break;
                }
            }
        })
}

pub async fn start(kind: Kind, deflate: bool) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    match kind {
        Kind::Stream | Kind::StreamAsync => {
            tokio::spawn(async move {
                loop {
                    let (tcp, _) = listener.accept().await.unwrap();
                    tokio::spawn(async move {
                        let ws = if kind == Kind::Stream {
                            wavesock::accept_hdr_async_with_config(tcp, amend, config(deflate))
                                .await
                        } else {
                            wavesock::accept_async_callback_with_config(
                                tcp,
                                |req: Request, resp: Response| async move { amend(&req, resp) },
                                config(deflate),
                            )
                            .await
                        };
                        if let Ok(ws) = ws {
                            echo(ws).await;
                        }
                    });
                }
            });
        }
        Kind::Hyper => {
            tokio::spawn(async move {
                loop {
                    let (tcp, _) = listener.accept().await.unwrap();
                    let service = service_fn(move |req| hyper_handle(req, deflate));
                    tokio::spawn(async move {
                        let mut builder =
                            hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                        builder.http2().enable_connect_protocol();
                        let _ = builder
                            .serve_connection_with_upgrades(TokioIo::new(tcp), service)
                            .await;
                    });
                }
            });
        }
        Kind::Axum => {
            let app = axum::Router::new()
                .route("/chat", axum::routing::any(axum_handler))
                .with_state(deflate);
            tokio::spawn(async move { axum::serve(listener, app).await });
        }
        Kind::Hub => {
            let hub = Hub::new(HubEcho, HubConfig::default().config(config(deflate))).unwrap();
            tokio::spawn(hub.serve(listener));
        }
    }
    addr
}

/// A client masking key of zeros keeps payloads readable.
fn masked(b0: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![b0];
    assert!(payload.len() < 126);
    out.push(0x80 | payload.len() as u8);
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(payload);
    out
}

fn compressed(text: &[u8]) -> Vec<u8> {
    let mut c = flate2::Compress::new(flate2::Compression::default(), false);
    let mut wire = Vec::with_capacity(64);
    c.compress_vec(text, &mut wire, flate2::FlushCompress::Sync)
        .unwrap();
    wire.truncate(wire.len() - 4);
    wire
}

fn inflate(payload: &[u8]) -> Vec<u8> {
    let mut d = flate2::Decompress::new(false);
    let mut input = payload.to_vec();
    input.extend_from_slice(&[0, 0, 0xff, 0xff]);
    let mut out = Vec::with_capacity(1024);
    d.decompress_vec(&input, &mut out, flate2::FlushDecompress::Sync)
        .unwrap();
    out
}

/// The server's answer to one request: the head (without `date`), the body
/// of a non-101 answer, and after a 101 what a compressed text frame gets
/// (its echo, inflated, or the close code).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub head: String,
    pub body: String,
    pub after: String,
}

impl Answer {
    pub fn status(&self) -> u16 {
        self.head
            .lines()
            .next()
            .unwrap_or("")
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }
}

async fn read_frame(tcp: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(u8, Vec<u8>)> {
    loop {
        if buf.len() >= 2 {
            let len = (buf[1] & 0x7f) as usize;
            let (hl, len) = match len {
                126 if buf.len() >= 4 => (4, u16::from_be_bytes([buf[2], buf[3]]) as usize),
                126 => (usize::MAX, 0),
                127 => panic!("big frame"),
                n => (2, n),
            };
            if hl != usize::MAX && buf.len() >= hl + len {
                let b0 = buf[0];
                let payload = buf[hl..hl + len].to_vec();
                buf.drain(..hl + len);
                return Some((b0, payload));
            }
        }
        let mut chunk = [0u8; 4096];
        let n = timeout(LIMIT, tcp.read(&mut chunk)).await.ok()?.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Sends `raw` and reads the answer; after a 101, sends `frame` (a
/// compressed text frame by default) and reads what comes back.
pub async fn exchange(addr: SocketAddr, raw: &[u8], rsv1: bool) -> Answer {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(raw).await.unwrap();
    let mut buf = Vec::new();
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 4096];
        let n = match timeout(LIMIT, tcp.read(&mut chunk)).await {
            Ok(Ok(n)) => n,
            Ok(Err(e)) => {
                return Answer {
                    head: format!("<read error {e}> {:?}", String::from_utf8_lossy(&buf)),
                    body: String::new(),
                    after: String::new(),
                };
            }
            Err(_) => {
                return Answer {
                    head: format!("<timeout> {:?}", String::from_utf8_lossy(&buf)),
                    body: String::new(),
                    after: String::new(),
                };
            }
        };
        if n == 0 {
            return Answer {
                head: format!("<eof> {:?}", String::from_utf8_lossy(&buf)),
                body: String::new(),
                after: String::new(),
            };
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head_text = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines: Vec<String> = head_text
        .split("\r\n")
        .filter(|l| !l.is_empty())
        .filter(|l| !l.to_ascii_lowercase().starts_with("date:"))
        .map(str::to_owned)
        .collect();
    let first = lines.remove(0);
    let mut rest: Vec<String> = lines
        .into_iter()
        .map(|l| match l.split_once(':') {
            Some((n, v)) => format!("{}: {}", n.to_ascii_lowercase(), v.trim()),
            None => l,
        })
        .collect();
    rest.sort();
    let head = std::iter::once(first)
        .chain(rest)
        .collect::<Vec<_>>()
        .join("\n");
    let mut rest = buf[end..].to_vec();
    let mut answer = Answer {
        head,
        body: String::new(),
        after: String::new(),
    };
    if answer.status() != 101 {
        let len: Option<usize> = answer.header("content-length").and_then(|v| v.parse().ok());
        loop {
            if len.is_some_and(|l| rest.len() >= l) {
                break;
            }
            let mut chunk = [0u8; 4096];
            match timeout(Duration::from_millis(500), tcp.read(&mut chunk)).await {
                Ok(Ok(n)) if n > 0 => rest.extend_from_slice(&chunk[..n]),
                _ => break,
            }
        }
        answer.body = String::from_utf8_lossy(&rest).into_owned();
        return answer;
    }
    let frame = if rsv1 {
        masked(0xC1, &compressed(b"hello"))
    } else {
        masked(0x81, b"hello")
    };
    tcp.write_all(&frame).await.unwrap();
    answer.after = match read_frame(&mut tcp, &mut rest).await {
        None => "<no frame>".into(),
        Some((b0, payload)) if b0 & 0x0f == 0x8 => {
            let code = if payload.len() >= 2 {
                u16::from_be_bytes([payload[0], payload[1]])
            } else {
                0
            };
            format!("close {code}")
        }
        Some((b0, payload)) if b0 & 0x40 != 0 => format!(
            "echo rsv1 {:?}",
            String::from_utf8_lossy(&inflate(&payload))
        ),
        Some((b0, payload)) => format!("echo b0={b0:#x} {:?}", String::from_utf8_lossy(&payload)),
    };
    answer
}

pub fn req(first: &str, headers: &[&str]) -> Vec<u8> {
    let mut s = format!("{first}\r\n");
    for h in headers {
        s.push_str(h);
        s.push_str("\r\n");
    }
    s.push_str("\r\n");
    s.into_bytes()
}

const HOST: &str = "Host: localhost";
const UP: &str = "Upgrade: websocket";
const CONN: &str = "Connection: Upgrade";
const KEY: &str = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==";
const V13: &str = "Sec-WebSocket-Version: 13";
const GET: &str = "GET /chat HTTP/1.1";

fn base(extra: &[&'static str]) -> Vec<&'static str> {
    let mut v = vec![HOST, UP, CONN, KEY, V13];
    v.extend_from_slice(extra);
    v
}

/// (name, request, send a compressed frame after a 101)
pub fn cases() -> Vec<(&'static str, Vec<u8>, bool)> {
    let pmd = |offer: &'static str| -> Vec<&'static str> { base(&[offer]) };
    let mut cases = vec![
        ("valid", req(GET, &base(&[])), false),
        ("valid-rsv1", req(GET, &base(&[])), true),
        (
            "pmd",
            req(GET, &pmd("Sec-WebSocket-Extensions: permessage-deflate")),
            true,
        ),
        (
            "pmd-plain-frame",
            req(GET, &pmd("Sec-WebSocket-Extensions: permessage-deflate")),
            false,
        ),
        (
            "pmd-cmwb",
            req(
                GET,
                &pmd("Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits"),
            ),
            true,
        ),
        (
            "pmd-smwb10",
            req(
                GET,
                &pmd("Sec-WebSocket-Extensions: permessage-deflate; server_max_window_bits=10"),
            ),
            true,
        ),
        (
            "pmd-smwb8",
            req(
                GET,
                &pmd("Sec-WebSocket-Extensions: permessage-deflate; server_max_window_bits=8"),
            ),
            true,
        ),
        (
            "pmd-two-offers",
            req(
                GET,
                &pmd(
                    "Sec-WebSocket-Extensions: permessage-deflate; server_max_window_bits=7, permessage-deflate; client_no_context_takeover",
                ),
            ),
            true,
        ),
        (
            "pmd-two-headers",
            req(
                GET,
                &base(&[
                    "Sec-WebSocket-Extensions: x-foo",
                    "Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover",
                ]),
            ),
            true,
        ),
        (
            "pmd-bad-cmwb16",
            req(
                GET,
                &pmd("Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits=16"),
            ),
            true,
        ),
        (
            "pmd-unknown-param",
            req(
                GET,
                &pmd("Sec-WebSocket-Extensions: permessage-deflate; foo"),
            ),
            true,
        ),
        (
            "pmd-repeated-param",
            req(
                GET,
                &pmd(
                    "Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover; server_no_context_takeover",
                ),
            ),
            true,
        ),
        (
            "pmd-garbage",
            req(GET, &pmd("Sec-WebSocket-Extensions: ;;,,=\"")),
            true,
        ),
        (
            "pmd-quoted",
            req(
                GET,
                &pmd("Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits=\"10\""),
            ),
            true,
        ),
        (
            "pmd-case",
            req(GET, &pmd("Sec-WebSocket-Extensions: PerMessage-Deflate")),
            true,
        ),
        ("cb-forge", req(GET, &base(&["x-cb: forge"])), true),
        (
            "cb-forge-pmd",
            req(
                GET,
                &base(&[
                    "x-cb: forge",
                    "Sec-WebSocket-Extensions: permessage-deflate",
                ]),
            ),
            true,
        ),
        ("cb-forge-ext", req(GET, &base(&["x-cb: forge-ext"])), true),
        (
            "cb-forge-ext-pmd",
            req(
                GET,
                &base(&[
                    "x-cb: forge-ext",
                    "Sec-WebSocket-Extensions: permessage-deflate",
                ]),
            ),
            true,
        ),
        ("cb-status", req(GET, &base(&["x-cb: status"])), false),
        ("cb-refuse", req(GET, &base(&["x-cb: refuse"])), false),
        (
            "cb-proto",
            req(
                GET,
                &base(&["x-cb: proto", "Sec-WebSocket-Protocol: superchat, chat"]),
            ),
            false,
        ),
        (
            "proto-none-offered-match",
            req(GET, &base(&["Sec-WebSocket-Protocol: other"])),
            false,
        ),
        (
            "proto-two-headers",
            req(
                GET,
                &base(&[
                    "x-cb: proto",
                    "Sec-WebSocket-Protocol: other",
                    "Sec-WebSocket-Protocol: superchat",
                ]),
            ),
            false,
        ),
        ("no-key", req(GET, &[HOST, UP, CONN, V13]), false),
        (
            "two-keys",
            req(GET, &base(&["Sec-WebSocket-Key: AQIDBAUGBwgJCgsMDQ4PEA=="])),
            false,
        ),
        (
            "bad-key",
            req(GET, &[HOST, UP, CONN, "Sec-WebSocket-Key: short", V13]),
            false,
        ),
        (
            "version-8",
            req(GET, &[HOST, UP, CONN, KEY, "Sec-WebSocket-Version: 8"]),
            false,
        ),
        ("no-version", req(GET, &[HOST, UP, CONN, KEY]), false),
        (
            "two-versions",
            req(GET, &base(&["Sec-WebSocket-Version: 8"])),
            false,
        ),
        (
            "post",
            req("POST /chat HTTP/1.1", &base(&["Content-Length: 0"])),
            false,
        ),
        ("http10", req("GET /chat HTTP/1.0", &base(&[])), false),
        (
            "connect11",
            req("CONNECT localhost:80 HTTP/1.1", &base(&[])),
            false,
        ),
        (
            "connect11-path",
            req("CONNECT /chat HTTP/1.1", &base(&[])),
            false,
        ),
        ("head", req("HEAD /chat HTTP/1.1", &base(&[])), false),
        ("no-host", req(GET, &[UP, CONN, KEY, V13]), false),
        ("no-upgrade", req(GET, &[HOST, CONN, KEY, V13]), false),
        (
            "upgrade-h2c",
            req(GET, &[HOST, "Upgrade: h2c", CONN, KEY, V13]),
            false,
        ),
        (
            "conn-keepalive",
            req(GET, &[HOST, UP, "Connection: keep-alive", KEY, V13]),
            false,
        ),
        (
            "conn-list",
            req(
                GET,
                &[HOST, UP, "Connection: keep-alive, Upgrade", KEY, V13],
            ),
            false,
        ),
        ("plain-get", req(GET, &[HOST]), false),
    ];
    for (name, hosts, _) in HOST_CASES {
        cases.push((name, upgrade_with_hosts(hosts), false));
    }
    cases
}

pub async fn answers(kind: Kind, deflate: bool) -> Vec<(&'static str, Answer)> {
    let addr = start(kind, deflate).await;
    let mut out = Vec::new();
    for (name, raw, rsv1) in cases() {
        out.push((name, exchange(addr, &raw, rsv1).await));
    }
    out
}

/// One HTTP/2 request (h2c, prior knowledge) through the h2 crate: the
/// answer's status and headers, its body when refused, and after a `200`
/// what a WebSocket frame sent on the stream gets back.
pub async fn h2_exchange(
    addr: SocketAddr,
    method: &str,
    protocol: Option<&str>,
    headers: &[(&str, &str)],
    rsv1: bool,
) -> Answer {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, connection) = match h2::client::handshake(tcp).await {
        Ok(x) => x,
        Err(e) => {
            return Answer {
                head: format!("<h2 handshake {e}>"),
                body: String::new(),
                after: String::new(),
            };
        }
    };
    tokio::spawn(connection);
    let mut send = send.ready().await.unwrap();
    let mut request = http::Request::builder()
        .method(method)
        .uri(format!("http://{addr}/chat"))
        .version(http::Version::HTTP_2)
        .body(())
        .unwrap();
    for (n, v) in headers {
        request.headers_mut().append(
            http::HeaderName::from_bytes(n.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    if let Some(p) = protocol {
        request.extensions_mut().insert(h2::ext::Protocol::from(p));
    }
    let (response, mut stream) = match send.send_request(request, false) {
        Ok(x) => x,
        Err(e) => {
            return Answer {
                head: format!("<send_request {e}>"),
                body: String::new(),
                after: String::new(),
            };
        }
    };
    let response = match timeout(LIMIT, response).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            return Answer {
                head: format!("<response {e}>"),
                body: String::new(),
                after: String::new(),
            };
        }
        Err(_) => {
            return Answer {
                head: "<timeout>".into(),
                body: String::new(),
                after: String::new(),
            };
        }
    };
    let mut lines: Vec<String> = response
        .headers()
        .iter()
        .filter(|(n, _)| n.as_str() != "date")
        .map(|(n, v)| format!("{n}: {}", v.to_str().unwrap_or("?")))
        .collect();
    lines.sort();
    let head = std::iter::once(format!("HTTP/2 {}", response.status().as_u16()))
        .chain(lines)
        .collect::<Vec<_>>()
        .join("\n");
    let status = response.status();
    let mut body = response.into_body();
    let mut answer = Answer {
        head,
        body: String::new(),
        after: String::new(),
    };
    if status != http::StatusCode::OK {
        let mut text = Vec::new();
        while let Ok(Some(Ok(chunk))) = timeout(Duration::from_millis(500), body.data()).await {
            text.extend_from_slice(&chunk);
        }
        answer.body = String::from_utf8_lossy(&text).into_owned();
        return answer;
    }
    let frame = if rsv1 {
        masked(0xC1, &compressed(b"hello"))
    } else {
        masked(0x81, b"hello")
    };
    stream.send_data(frame.into(), false).unwrap();
    let mut buf = Vec::new();
    answer.after = loop {
        if buf.len() >= 2 && buf.len() >= 2 + (buf[1] & 0x7f) as usize {
            let b0 = buf[0];
            let payload = buf[2..2 + (buf[1] & 0x7f) as usize].to_vec();
            break if b0 & 0x0f == 0x8 {
                format!(
                    "close {}",
                    if payload.len() >= 2 {
                        u16::from_be_bytes([payload[0], payload[1]])
                    } else {
                        0
                    }
                )
            } else if b0 & 0x40 != 0 {
                format!(
                    "echo rsv1 {:?}",
                    String::from_utf8_lossy(&inflate(&payload))
                )
            } else {
                format!("echo b0={b0:#x} {:?}", String::from_utf8_lossy(&payload))
            };
        }
        match timeout(LIMIT, body.data()).await {
            Ok(Some(Ok(chunk))) => {
                let _ = body.flow_control().release_capacity(chunk.len());
                buf.extend_from_slice(&chunk);
            }
            Ok(Some(Err(e))) => break format!("<stream error {e}>"),
            Ok(None) => break "<end of stream>".into(),
            Err(_) => break "<timeout>".into(),
        }
    };
    answer
}

/// An HTTP/2 request: its name, method, `:protocol`, headers, and whether
/// the frame sent after a `200` is compressed (RSV1).
type H2Case = (
    &'static str,
    &'static str,
    Option<&'static str>,
    Vec<(&'static str, &'static str)>,
    bool,
);

pub fn h2_cases() -> Vec<H2Case> {
    let v13 = ("sec-websocket-version", "13");
    vec![
        ("valid", "CONNECT", Some("websocket"), vec![v13], false),
        ("valid-rsv1", "CONNECT", Some("websocket"), vec![v13], true),
        (
            "protocol-case",
            "CONNECT",
            Some("WebSocket"),
            vec![v13],
            false,
        ),
        ("protocol-chat", "CONNECT", Some("chat"), vec![v13], false),
        ("protocol-empty", "CONNECT", Some(""), vec![v13], false),
        ("no-version", "CONNECT", Some("websocket"), vec![], false),
        (
            "version-8",
            "CONNECT",
            Some("websocket"),
            vec![("sec-websocket-version", "8")],
            false,
        ),
        (
            "pmd",
            "CONNECT",
            Some("websocket"),
            vec![v13, ("sec-websocket-extensions", "permessage-deflate")],
            true,
        ),
        (
            "pmd-plain-frame",
            "CONNECT",
            Some("websocket"),
            vec![v13, ("sec-websocket-extensions", "permessage-deflate")],
            false,
        ),
        (
            "pmd-smwb9",
            "CONNECT",
            Some("websocket"),
            vec![
                v13,
                (
                    "sec-websocket-extensions",
                    "permessage-deflate; server_max_window_bits=9",
                ),
            ],
            true,
        ),
        (
            "pmd-bad",
            "CONNECT",
            Some("websocket"),
            vec![v13, ("sec-websocket-extensions", "permessage-deflate; x=1")],
            true,
        ),
        (
            "cb-forge",
            "CONNECT",
            Some("websocket"),
            vec![v13, ("x-cb", "forge")],
            true,
        ),
        (
            "cb-forge-pmd",
            "CONNECT",
            Some("websocket"),
            vec![
                v13,
                ("x-cb", "forge"),
                ("sec-websocket-extensions", "permessage-deflate"),
            ],
            true,
        ),
        (
            "cb-forge-ext",
            "CONNECT",
            Some("websocket"),
            vec![v13, ("x-cb", "forge-ext")],
            true,
        ),
        (
            "cb-status",
            "CONNECT",
            Some("websocket"),
            vec![v13, ("x-cb", "status")],
            false,
        ),
        (
            "cb-refuse",
            "CONNECT",
            Some("websocket"),
            vec![v13, ("x-cb", "refuse")],
            false,
        ),
        (
            "cb-proto",
            "CONNECT",
            Some("websocket"),
            vec![
                v13,
                ("x-cb", "proto"),
                ("sec-websocket-protocol", "superchat, chat"),
            ],
            false,
        ),
        (
            "key-given",
            "CONNECT",
            Some("websocket"),
            vec![v13, ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")],
            false,
        ),
        ("get-h2", "GET", None, vec![v13], false),
        ("post-h2", "POST", None, vec![v13], false),
    ]
}

/// What holds on every server: the handshake's
/// own headers win over a callback's, a refusal is the callback's, the
/// extension named is the one the connection runs (a compressed frame is
/// inflated only when negotiated, else closed with 1002), and a request
/// that is not a `GET` upgrade gets its HTTP error.
#[tokio::test]
async fn invariants_hold_on_every_server() {
    let deflates: &[bool] = if cfg!(feature = "deflate") {
        &[false, true]
    } else {
        &[false]
    };
    for &deflate in deflates {
        for kind in KINDS {
            let all = answers(kind, deflate).await;
            let get = |name: &str| all.iter().find(|(n, _)| *n == name).unwrap().1.clone();
            let ctx = format!("{kind:?} deflate={deflate}");
            let accept = Some("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".to_owned());

            let valid = get("valid");
            assert_eq!(valid.status(), 101, "{ctx}");
            assert_eq!(valid.header("sec-websocket-accept"), accept, "{ctx}");
            assert_eq!(valid.after, "echo b0=0x81 \"hello\"", "{ctx}");
            assert_eq!(get("valid-rsv1").after, "close 1002", "{ctx}");

            let pmd = get("pmd");
            if deflate {
                assert_eq!(
                    pmd.header("sec-websocket-extensions").as_deref(),
                    Some("permessage-deflate"),
                    "{ctx}"
                );
                assert_eq!(pmd.after, "echo b0=0x81 \"hello\"", "{ctx}: inflated");
            } else {
                assert_eq!(pmd.header("sec-websocket-extensions"), None, "{ctx}");
                assert_eq!(pmd.after, "close 1002", "{ctx}");
            }
            for bad in [
                "pmd-bad-cmwb16",
                "pmd-unknown-param",
                "pmd-repeated-param",
                "pmd-garbage",
            ] {
                let a = get(bad);
                assert_eq!(a.status(), 101, "{ctx} {bad}");
                assert_eq!(a.header("sec-websocket-extensions"), None, "{ctx} {bad}");
                assert_eq!(a.after, "close 1002", "{ctx} {bad}");
            }

            if kind != Kind::Axum {
                // The callback's own status, accept key, Upgrade and
                // extensions are overridden; its other headers stay.
                for name in [
                    "cb-forge",
                    "cb-forge-pmd",
                    "cb-forge-ext",
                    "cb-forge-ext-pmd",
                ] {
                    let a = get(name);
                    assert_eq!(a.status(), 101, "{ctx} {name}");
                    assert_eq!(a.header("sec-websocket-accept"), accept, "{ctx} {name}");
                    assert_eq!(
                        a.header("upgrade").as_deref(),
                        Some("websocket"),
                        "{ctx} {name}"
                    );
                    let ext = a.header("sec-websocket-extensions");
                    if deflate && name.ends_with("-pmd") {
                        assert_eq!(ext.as_deref(), Some("permessage-deflate"), "{ctx} {name}");
                        assert_eq!(a.after, "echo b0=0x81 \"hello\"", "{ctx} {name}");
                    } else {
                        assert_eq!(ext, None, "{ctx} {name}");
                        assert_eq!(a.after, "close 1002", "{ctx} {name}");
                    }
                }
                assert_eq!(get("cb-status").status(), 101, "{ctx}");
                let refused = get("cb-refuse");
                assert_eq!(refused.status(), 403, "{ctx}");
                assert_eq!(refused.header("x-refused").as_deref(), Some("1"), "{ctx}");
                assert_eq!(refused.body, "nope\n", "{ctx}");
            }
            let proto = get("cb-proto");
            assert_eq!(
                proto.header("sec-websocket-protocol").as_deref(),
                Some("chat"),
                "{ctx}"
            );

            for (name, status) in [
                ("no-key", 400),
                ("two-keys", 400),
                ("bad-key", 400),
                ("version-8", 426),
                ("no-version", 426),
                ("post", 405),
                ("http10", 400),
                ("no-host", 400),
                ("no-upgrade", 400),
                ("conn-keepalive", 400),
            ] {
                assert_eq!(get(name).status(), status, "{ctx} {name}");
            }
            for (name, _, status) in HOST_CASES {
                let a = get(name);
                assert_eq!(a.status(), *status, "{ctx} {name}: {a:?}");
                if *status == 101 {
                    assert_eq!(a.after, "echo b0=0x81 \"hello\"", "{ctx} {name}");
                }
            }
            if matches!(kind, Kind::Stream | Kind::StreamAsync | Kind::Hub) {
                assert_eq!(get("connect11").status(), 405, "{ctx}");
                assert_eq!(get("connect11-path").status(), 405, "{ctx}");
                assert_eq!(get("head").status(), 405, "{ctx}");
            }
        }
    }
}

/// What holds over HTTP/2 (RFC 8441) on the hyper and axum servers: `200`
/// for a good extended CONNECT, `400` for another `:protocol`, `426` for
/// another version, `405` naming `CONNECT` for other methods, the
/// extension named the one the stream runs, and a callback's refusal
/// passed on.
#[tokio::test]
async fn http2_invariants_hold_on_hyper_and_axum() {
    let deflates: &[bool] = if cfg!(feature = "deflate") {
        &[false, true]
    } else {
        &[false]
    };
    for &deflate in deflates {
        for kind in [Kind::Hyper, Kind::Axum] {
            let addr = start(kind, deflate).await;
            let ctx = format!("{kind:?} deflate={deflate}");
            for (name, method, protocol, headers, rsv1) in h2_cases() {
                if name.starts_with("cb-") && kind == Kind::Axum {
                    continue; // the callbacks are the hyper server's
                }
                let a = h2_exchange(addr, method, protocol, &headers, rsv1).await;
                let ctx = format!("{ctx} {name}");
                match name {
                    "valid" | "protocol-case" | "key-given" | "pmd-plain-frame" | "cb-status" => {
                        assert_eq!(a.status(), 200, "{ctx}: {a:?}");
                        assert_eq!(a.after, "echo b0=0x81 \"hello\"", "{ctx}");
                    }
                    "valid-rsv1" | "pmd-bad" | "cb-forge" | "cb-forge-ext" => {
                        assert_eq!(a.status(), 200, "{ctx}: {a:?}");
                        assert_eq!(a.header("sec-websocket-extensions"), None, "{ctx}");
                        assert_eq!(a.after, "close 1002", "{ctx}");
                    }
                    "pmd" | "pmd-smwb9" | "cb-forge-pmd" => {
                        assert_eq!(a.status(), 200, "{ctx}: {a:?}");
                        let ext = a.header("sec-websocket-extensions");
                        if deflate {
                            assert!(
                                ext.is_some_and(|e| e.starts_with("permessage-deflate")),
                                "{ctx}: {a:?}"
                            );
                            assert_eq!(a.after, "echo b0=0x81 \"hello\"", "{ctx}: inflated");
                        } else {
                            assert_eq!(ext, None, "{ctx}");
                            assert_eq!(a.after, "close 1002", "{ctx}");
                        }
                    }
                    "protocol-chat" | "protocol-empty" => {
                        assert_eq!(a.status(), 400, "{ctx}: {a:?}")
                    }
                    "no-version" | "version-8" => assert_eq!(a.status(), 426, "{ctx}: {a:?}"),
                    "get-h2" | "post-h2" => {
                        assert_eq!(a.status(), 405, "{ctx}: {a:?}");
                        assert_eq!(a.header("allow").as_deref(), Some("CONNECT"), "{ctx}");
                    }
                    "cb-refuse" => assert_eq!(a.status(), 403, "{ctx}: {a:?}"),
                    "cb-proto" => assert_eq!(
                        a.header("sec-websocket-protocol").as_deref(),
                        Some("chat"),
                        "{ctx}: {a:?}"
                    ),
                    other => panic!("no expectation for {other}"),
                }
                // HTTP/2 has no accept key, and no connection-specific
                // headers, whatever a callback wrote.
                for h in ["sec-websocket-accept", "upgrade", "connection"] {
                    assert_eq!(a.header(h), None, "{ctx}: {h}");
                }
            }
        }
    }
}

/// Over HTTP/2 a callback's `Sec-WebSocket-Accept` does not reach the
/// client: the `200` has no accept key of its own to put back, so
/// `Accepting::respond` removes it (found in a break-it round; it went out
/// as the callback wrote it).
#[tokio::test]
async fn h2_a_callbacks_accept_key_is_not_sent() {
    let addr = start(Kind::Hyper, false).await;
    let a = h2_exchange(
        addr,
        "CONNECT",
        Some("websocket"),
        &[("sec-websocket-version", "13"), ("x-cb", "forge")],
        false,
    )
    .await;
    assert_eq!(a.status(), 200, "{a:?}");
    assert_eq!(a.header("sec-websocket-accept"), None, "{a:?}");
}

/// `CONNECT` over HTTP/1.1 is `405 Method Not Allowed` (Allow: GET) from
/// the hyper upgrade and the axum extractor as from `accept_async` and the
/// hub: extended CONNECT exists only in HTTP/2 (RFC 8441). (Found in a
/// break-it round: they answered 400, `:protocol` missing.)
#[tokio::test]
async fn http11_connect_gets_405_from_hyper_and_axum_too() {
    for kind in [Kind::Hyper, Kind::Axum] {
        let addr = start(kind, false).await;
        let a = exchange(addr, &req("CONNECT /chat HTTP/1.1", &base(&[])), false).await;
        assert_eq!(a.status(), 405, "{kind:?}: {a:?}");
    }
}

/// Two `Sec-WebSocket-Version` fields, 13 and 8, are refused by every
/// server, as two `Sec-WebSocket-Key` fields are. (Found in a break-it
/// round: only the first was read, and the request accepted.)
#[tokio::test]
async fn two_version_fields_are_refused() {
    for kind in KINDS {
        let addr = start(kind, false).await;
        let a = exchange(addr, &req(GET, &base(&["Sec-WebSocket-Version: 8"])), false).await;
        assert_ne!(a.status(), 101, "{kind:?}: {a:?}");
    }
}

/// The `Host` cases (tests/support/hosts.rs) get the same answer from
/// every server, body and all (but for hyper's parser refusing a control
/// character itself, with an empty body): one field holding a host and an optional
/// port is accepted, two fields, an empty one or one that is no
/// `uri-host [ ":" port ]` get 400 (RFC 9112 §3.2). (Issue 68: they got
/// 101 everywhere, only the field's presence was checked.)
#[tokio::test]
async fn host_fields_are_answered_alike_by_every_server() {
    // (case, status, body) per case, of the first server.
    type Seen = Vec<(String, u16, String)>;
    let mut first: Option<(Kind, Seen)> = None;
    for kind in KINDS {
        let addr = start(kind, false).await;
        let mut seen = Vec::new();
        for (name, hosts, status) in HOST_CASES {
            let a = exchange(addr, &upgrade_with_hosts(hosts), false).await;
            assert_eq!(a.status(), *status, "{kind:?} {name}: {a:?}");
            // A control character never reaches wavesock behind hyper:
            // its parser answers 400 with an empty body of its own, where
            // wavesock's parser says why. Only the status is compared.
            let body = if *name == "host-ctl" {
                String::new()
            } else {
                a.body.clone()
            };
            seen.push((name.to_string(), a.status(), body));
        }
        match &first {
            None => first = Some((kind, seen)),
            Some((k, before)) => assert_eq!(&seen, before, "{kind:?} against {k:?}"),
        }
    }
}
