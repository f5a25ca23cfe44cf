//! The chat (on streams and on a hub's topics), hub_async and axum examples, served in-process and driven by wavesock
//! clients, so that `cargo test` notices when they break. (The chat page
//! itself is tested in a real browser by tests/browser/run.sh.)
// chat and hub_chat each include examples/support/redis_args.rs, as
// their binaries do.
#![allow(clippy::duplicate_mod)]

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wavesock::{Message, WebSocketStream};

#[allow(dead_code)] // its main() is not ours to call
#[path = "../../examples/chat.rs"]
mod chat;

#[allow(dead_code)]
#[path = "../../examples/hub_chat.rs"]
mod hub_chat;

#[allow(dead_code)]
#[path = "../../examples/axum_server.rs"]
mod axum_server;

#[allow(dead_code)]
#[path = "../../examples/hub_async.rs"]
mod hub_async;

#[allow(dead_code)]
#[path = "../../examples/stream_file.rs"]
mod stream_file;

type Client = WebSocketStream<wavesock::MaybeTlsStream<TcpStream>>;

async fn local() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    (l, addr)
}

/// A plain HTTP GET; returns the whole response (the servers close after it).
async fn http_get(addr: &str, path: &str) -> String {
    http_request(addr, "GET", path).await
}

async fn http_request(addr: &str, method: &str, path: &str) -> String {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tcp.read_to_end(&mut out).await.unwrap();
    String::from_utf8(out).unwrap()
}

/// The next text message that contains `needle`, skipping others.
async fn text_containing(ws: &mut Client, needle: &str) -> String {
    let wait = async {
        while let Some(msg) = ws.next().await {
            if let Message::Text(t) = msg.unwrap() {
                if t.as_str().contains(needle) {
                    return t.as_str().to_owned();
                }
            }
        }
        panic!("connection ended before {needle:?} arrived");
    };
    tokio::time::timeout(Duration::from_secs(5), wait)
        .await
        .expect("message in time")
}

#[tokio::test]
async fn chat_serves_its_page_and_broadcasts_to_every_client() {
    let (listener, addr) = local().await;
    tokio::spawn(chat::serve(listener));

    let page = http_get(&addr, "/").await;
    assert!(page.starts_with("HTTP/1.1 200 OK\r\n"), "{page}");
    assert!(page.contains("content-type: text/html"), "{page}");
    assert!(page.contains("new WebSocket("), "the page is the chat page");
    assert!(
        http_get(&addr, "/missing")
            .await
            .starts_with("HTTP/1.1 404")
    );
    // A plain GET on the endpoint is not an upgrade: refused as accept_async would.
    assert!(http_get(&addr, "/ws").await.starts_with("HTTP/1.1 400"));
    // Only GET is served; a 405 says so (RFC 9110 §15.5.6).
    let post = http_request(&addr, "POST", "/").await.to_ascii_lowercase();
    assert!(post.starts_with("http/1.1 405"), "{post}");
    assert!(post.contains("\r\nallow: get\r\n"), "{post}");

    let url = format!("ws://{addr}/ws");
    let (mut a, _) = wavesock::connect_async(url.as_str()).await.unwrap();
    let (mut b, _) = wavesock::connect_async(url.as_str()).await.unwrap();
    text_containing(&mut a, "joined").await;
    // Lines for one client alone go through a second sending handle.
    text_containing(&mut b, "welcome, you are guest ").await;
    a.send(Message::text("hello, b")).await.unwrap();
    let heard = text_containing(&mut b, "hello, b").await;
    assert!(
        heard.starts_with("guest ") && heard.ends_with(": hello, b"),
        "{heard}"
    );
    // The sender gets the same broadcast line.
    assert_eq!(text_containing(&mut a, "hello, b").await, heard);
    a.send(Message::binary(vec![1, 2, 3])).await.unwrap();
    text_containing(&mut a, "binary messages are not chat").await;

    b.close(None).await.unwrap();
    text_containing(&mut a, "left").await;
}

#[tokio::test]
async fn chat_refuses_oversized_lines_with_1009() {
    let (listener, addr) = local().await;
    tokio::spawn(chat::serve(listener));
    let (mut ws, _) = wavesock::connect_async(format!("ws://{addr}/ws").as_str())
        .await
        .unwrap();
    ws.send(Message::text("x".repeat(5000))).await.unwrap();
    let close = loop {
        match ws.next().await {
            Some(Ok(Message::Close(frame))) => break frame,
            Some(Ok(_)) => {}
            other => panic!("expected a close frame, got {other:?}"),
        }
    };
    assert_eq!(close.unwrap().code, wavesock::CloseCode::MESSAGE_TOO_BIG);
}

#[tokio::test]
async fn hub_chat_serves_its_page_and_publishes_to_every_guest() {
    let (listener, addr) = local().await;
    tokio::spawn(hub_chat::serve(listener, None));

    let page = http_get(&addr, "/").await;
    assert!(page.starts_with("HTTP/1.1 200 OK\r\n"), "{page}");
    assert!(page.contains("content-type: text/html"), "{page}");
    assert!(
        page.contains(&format!("server: {addr}")),
        "the page names its server"
    );
    assert!(
        http_get(&addr, "/missing")
            .await
            .starts_with("HTTP/1.1 404")
    );
    // A plain GET on the endpoint is not an upgrade.
    let plain = http_get(&addr, "/ws").await;
    assert!(
        plain.starts_with("HTTP/1.1 400") || plain.starts_with("HTTP/1.1 426"),
        "{plain}"
    );

    let url = format!("ws://{addr}/ws");
    let (mut a, _) = wavesock::connect_async(url.as_str()).await.unwrap();
    let welcome = text_containing(&mut a, "welcome, you are guest ").await;
    text_containing(&mut a, "joined").await;
    let (mut b, _) = wavesock::connect_async(url.as_str()).await.unwrap();
    text_containing(&mut b, "welcome, you are guest ").await;
    let joined = text_containing(&mut a, "joined").await;
    assert!(
        !welcome.contains(joined.trim_end_matches(" joined")),
        "another guest"
    );
    a.send(Message::text("hello, b")).await.unwrap();
    let heard = text_containing(&mut b, "hello, b").await;
    assert!(
        heard.starts_with("guest ") && heard.ends_with(": hello, b"),
        "{heard}"
    );
    // The sender gets the same line, from the same publish.
    assert_eq!(text_containing(&mut a, "hello, b").await, heard);
    a.send(Message::binary(vec![1, 2, 3])).await.unwrap();
    text_containing(&mut a, "binary messages are not chat").await;

    b.close(None).await.unwrap();
    text_containing(&mut a, "left").await;

    // Lines over the limit close the guest with 1009.
    a.send(Message::text("x".repeat(5000))).await.unwrap();
    let close = loop {
        match a.next().await {
            Some(Ok(Message::Close(frame))) => break frame,
            Some(Ok(_)) => {}
            other => panic!("expected a close frame, got {other:?}"),
        }
    };
    assert_eq!(close.unwrap().code, wavesock::CloseCode::MESSAGE_TOO_BIG);
}

#[tokio::test]
async fn axum_route_upgrades_to_wavesock() {
    let (listener, addr) = local().await;
    tokio::spawn(async move { axum::serve(listener, axum_server::app()).await });

    let (mut ws, response) = wavesock::connect_async(format!("ws://{addr}/ws").as_str())
        .await
        .unwrap();
    assert_eq!(response.status(), 101);
    ws.send(Message::text("through axum")).await.unwrap();
    let echo = ws.next().await.unwrap().unwrap();
    assert_eq!(echo.as_text(), Some("through axum"));
    // Other routes are plain axum, and see the live connection.
    let status = http_get(&addr, "/").await;
    assert!(status.contains("1 WebSocket client(s)"), "{status}");
    ws.close(None).await.unwrap();

    // Not an upgrade: wavesock's check refuses it on axum's behalf.
    let refused = http_get(&addr, "/ws").await;
    assert!(refused.starts_with("HTTP/1.1 400"), "{refused}");
}

#[tokio::test]
async fn stream_file_saves_a_sent_file_byte_for_byte() {
    let root = std::env::temp_dir().join(format!("wavesock-stream-file-{}", std::process::id()));
    let uploads = root.join("uploads");
    tokio::fs::create_dir_all(&root).await.unwrap();
    let source = root.join("source.bin");
    let data: Vec<u8> = (0..3_000_017u32).map(|i| (i % 241) as u8).collect();
    tokio::fs::write(&source, &data).await.unwrap();

    let (listener, addr) = local().await;
    tokio::spawn(stream_file::serve(listener, uploads.clone()));
    let written = stream_file::send(&format!("ws://{addr}/"), &source)
        .await
        .unwrap();
    assert_eq!(written, data.len() as u64);
    let saved = tokio::fs::read(uploads.join("upload-0-0")).await.unwrap();
    assert!(saved == data, "the saved file differs");
    tokio::fs::remove_dir_all(&root).await.unwrap();
}

/// hub_async with `options`, and its database to look into.
async fn hub_async_server(options: hub_async::Options) -> (String, hub_async::Db) {
    let (listener, addr) = local().await;
    let db = hub_async::Db::default();
    tokio::spawn(hub_async::serve(listener, db.clone(), options));
    (addr, db)
}

async fn next_answer(ws: &mut Client) -> Message {
    let next = tokio::time::timeout(Duration::from_secs(10), ws.next());
    next.await.expect("an answer in time").unwrap().unwrap()
}

#[tokio::test]
async fn hub_async_answers_each_connection_in_order_with_a_timeout() {
    let (addr, db) = hub_async_server(hub_async::Options {
        timeout: Duration::from_millis(300),
        ..Default::default()
    })
    .await;
    let (mut ws, _) = wavesock::connect_async(format!("ws://{addr}/"))
        .await
        .unwrap();
    // Sent together: a slow call first, and a read of the key written
    // just before it; the answers come in the order asked, each call
    // after the one before.
    for q in [
        "set a 1",
        "sleep 150",
        "sleep 2000",
        "get a",
        "get zz",
        "hello",
        "blob 3",
    ] {
        ws.feed(Message::text(q)).await.unwrap();
    }
    ws.flush().await.unwrap();
    let mut answers = Vec::new();
    for _ in 0..7 {
        answers.push(next_answer(&mut ws).await);
    }
    assert_eq!(
        answers,
        [
            Message::text("a set"),
            Message::text("slept 150"),
            Message::text("sleep 2000: timed out"),
            Message::text("a = 1"),
            Message::text("zz: not found"),
            Message::text("hello: unknown command"),
            Message::binary(b"xxx".to_vec()),
        ]
    );
    // The timed-out call was dropped with its timeout.
    assert_eq!(db.running(), 0);
}

#[tokio::test]
async fn hub_async_closes_a_client_past_its_queries_in_flight_and_cancels_them() {
    let (addr, db) = hub_async_server(hub_async::Options {
        timeout: Duration::from_secs(60),
        max_in_flight: 4,
    })
    .await;
    let (mut ws, _) = wavesock::connect_async(format!("ws://{addr}/"))
        .await
        .unwrap();
    for _ in 0..5 {
        ws.feed(Message::text("sleep 60000")).await.unwrap();
    }
    ws.flush().await.unwrap();
    let close = match next_answer(&mut ws).await {
        Message::Close(frame) => frame.unwrap(),
        other => panic!("no answer before the close: {other:?}"),
    };
    assert_eq!(close.code, wavesock::CloseCode::TRY_AGAIN_LATER);
    // The four calls in progress end with the connection.
    let gone = async {
        while db.running() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), gone)
        .await
        .expect("the closed connection's calls are cancelled");
}

#[tokio::test]
async fn hub_async_keeps_a_client_that_reads_slowly_and_answers_it_in_order() {
    const BLOB: usize = 1 << 20;
    let (addr, _db) = hub_async_server(hub_async::Options::default()).await;
    let (mut ws, _) = wavesock::connect_async(format!("ws://{addr}/"))
        .await
        .unwrap();
    // As many of the largest answers as the limits allow, asked at once,
    // and nothing read for a while: more than the socket buffers take
    // waits in the hub, within its backpressure limit.
    let asked = hub_async::Options::default().max_in_flight;
    for _ in 0..asked {
        ws.feed(Message::text(format!("blob {BLOB}")))
            .await
            .unwrap();
    }
    ws.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    ws.send(Message::text("get q")).await.unwrap();
    for _ in 0..asked {
        match next_answer(&mut ws).await {
            Message::Binary(b) => assert_eq!(b.len(), BLOB),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(next_answer(&mut ws).await, Message::text("q: not found"));
}

/// With the `metrics` feature: `hub_chat --metrics` scraped by a real
/// Prometheus server (Debian's `prometheus`, started here on free ports
/// with a one-second scrape interval): three guests join and say two
/// lines each, one upgrade is refused (no such path), and Prometheus'
/// query API returns the open connections, the lines received, the
/// refusal and the deliveries they made. Alone in a child process: the
/// exporter is the process's recorder.
#[cfg(feature = "metrics")]
#[test]
fn hub_chat_metrics_reach_a_real_prometheus() {
    use crate::support::{child, services};

    if !child::alone() {
        return;
    }
    let found = services::on_path("prometheus");
    if !services::available(
        "prometheus",
        found,
        "prometheus on the PATH: the Debian or Ubuntu package prometheus",
    ) {
        return;
    }
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    };
    let (exporter, web) = (free(), free());
    let dir = std::env::temp_dir().join(format!("wavesock-prometheus-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: wavesock\n    static_configs:\n      - targets: ['{exporter}']\n"
        ),
    )
    .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _prometheus = Kill(
        std::process::Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={web}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start prometheus"),
    );
    let rt = crate::support::two_workers();
    rt.block_on(async {
        hub_chat::metrics_args::serve(&exporter.to_string()).unwrap();
        let (listener, addr) = local().await;
        tokio::spawn(hub_chat::serve(listener, None));
        // Guests on raw sockets, so that only the server's side counts
        // (a wavesock client in this process would record its traffic
        // too). One at a time, so that each join reaches the guests before
        // it: 1 + 2 + 3 deliveries, then 3 for each of the six lines.
        async fn next_text(tcp: &mut TcpStream, buf: &mut bytes::BytesMut) -> String {
            loop {
                let (b0, payload) = tokio::time::timeout(
                    Duration::from_secs(5),
                    crate::support::read_frame(tcp, buf),
                )
                .await
                .expect("a message in time")
                .expect("open");
                if b0 & 0x0F == 0x1 {
                    return String::from_utf8(payload).unwrap();
                }
            }
        }
        let mut guests = Vec::new();
        for _ in 0..3 {
            let mut tcp = TcpStream::connect(&addr).await.unwrap();
            let request = crate::support::request("").replace("GET /chat", "GET /ws");
            tcp.write_all(request.as_bytes()).await.unwrap();
            let mut buf = bytes::BytesMut::new();
            let end = loop {
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break i + 4;
                }
                assert!(tcp.read_buf(&mut buf).await.unwrap() > 0);
            };
            assert!(buf.starts_with(b"HTTP/1.1 101"));
            let _ = buf.split_to(end);
            assert!(next_text(&mut tcp, &mut buf).await.contains("welcome"));
            assert!(next_text(&mut tcp, &mut buf).await.contains("joined"));
            guests.push((tcp, buf));
        }
        for (i, (tcp, _)) in guests.iter_mut().enumerate() {
            for line in 0..2 {
                let text = format!("line {line} of {i}");
                tcp.write_all(&crate::support::masked(0x81, text.as_bytes())).await.unwrap();
            }
        }
        for (tcp, buf) in &mut guests {
            while !next_text(tcp, buf).await.contains("line 1 of 2") {}
        }
        let refused = TcpStream::connect(&addr).await.unwrap();
        let mut refused = refused;
        let request = crate::support::request("").replace("GET /chat", "GET /nope");
        refused.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        refused.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");

        // What Prometheus has, once it has scraped it: the body of its
        // answer to an instant query.
        let answer = |q: String| {
            let web = web.to_string();
            async move {
                let encoded: String = q
                    .bytes()
                    .map(|b| match b {
                        b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
                        _ => format!("%{b:02X}"),
                    })
                    .collect();
                // Refused until Prometheus listens.
                let mut tcp = TcpStream::connect(&web).await.ok()?;
                let request = format!(
                    "GET /api/v1/query?query={encoded} HTTP/1.1\r\nHost: {web}\r\nConnection: close\r\n\r\n"
                );
                tcp.write_all(request.as_bytes()).await.ok()?;
                let mut answer = String::new();
                tcp.read_to_string(&mut answer).await.ok()?;
                Some(answer)
            }
        };
        let query = |q: &'static str| {
            let answer = answer(q.to_string());
            async move {
                let answer = answer.await?;
                // `"value":[1700000000.123,"42"]`: the number in quotes.
                let at = answer.find("\"value\":[")?;
                let rest = &answer[at..];
                let quoted = rest.split('"').nth(3)?;
                quoted.parse::<f64>().ok()
            }
        };
        let expected = [
            ("sum(wavesock_connections_open)", 3.0),
            ("sum(wavesock_connections_accepted_total)", 3.0),
            ("sum(wavesock_messages_received_total{kind=\"text\"})", 6.0),
            ("sum(wavesock_upgrades_refused_total{reason=\"not_found\"})", 1.0),
            ("sum(wavesock_topic_deliveries_total)", 24.0),
            ("sum(wavesock_topic_subscriptions)", 3.0),
            // Buckets, not the exporter's default summary: 16 bounds and
            // +Inf for each engine that served a handshake.
            (
                "count(wavesock_handshake_duration_seconds_bucket) / count(wavesock_handshake_duration_seconds_count)",
                17.0,
            ),
        ];
        let mut last = Vec::new();
        for _ in 0..200 {
            last.clear();
            for (q, want) in expected {
                last.push((q, query(q).await, want));
            }
            if last.iter().all(|(_, got, want)| *got == Some(*want)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for (q, got, want) in &last {
            assert_eq!(*got, Some(*want), "{q}: {last:?}");
        }
        // Every query of the dashboard runs, with its variables as Grafana
        // fills them for "all instances" and a short range.
        for expr in dashboard_queries() {
            let q = expr
                .replace("$__rate_interval", "1m")
                .replace("$__range", "1h")
                .replace("$instance", ".*");
            let got = answer(q.clone()).await.expect("an answer");
            assert!(
                got.starts_with("HTTP/1.1 200") && got.contains("\"status\":\"success\""),
                "{q}: {got}"
            );
        }
        drop(guests);
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// The PromQL of every panel of `examples/grafana-dashboard.json`.
fn dashboard_queries() -> Vec<String> {
    let json = include_str!("../../examples/grafana-dashboard.json");
    let mut exprs = Vec::new();
    let mut rest = json;
    while let Some(at) = rest.find("\"expr\": \"") {
        rest = &rest[at + 9..];
        let mut expr = String::new();
        let mut chars = rest.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => expr.push(chars.next().expect("an escaped character")),
                c => expr.push(c),
            }
        }
        exprs.push(expr);
    }
    exprs
}

/// Every metric in `wavesock::meter`'s catalogue has a panel in the
/// dashboard, and every panel charts only metrics the catalogue names.
#[test]
fn the_dashboard_charts_every_metric_and_only_those() {
    let catalogue: std::collections::BTreeSet<String> = include_str!("../../src/meter/mod.rs")
        .lines()
        .filter_map(|l| l.strip_prefix("//! | `wavesock_"))
        .map(|l| format!("wavesock_{}", &l[..l.find('`').unwrap()]))
        .collect();
    assert!(catalogue.len() > 20, "{catalogue:?}");
    let exprs = dashboard_queries();
    assert!(exprs.len() > 20, "{exprs:?}");
    let mut charted = std::collections::BTreeSet::new();
    for expr in &exprs {
        let mut rest = expr.as_str();
        while let Some(at) = rest.find("wavesock_") {
            rest = &rest[at..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let name = &rest[..end];
            let base = ["_bucket", "_count", "_sum"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|b| catalogue.contains(*b)))
                .unwrap_or(name);
            assert!(catalogue.contains(base), "{base} (in {expr}) is no metric");
            charted.insert(base.to_string());
            rest = &rest[end..];
        }
    }
    let missing: Vec<_> = catalogue.difference(&charted).collect();
    assert!(missing.is_empty(), "no panel for {missing:?}");
}
