//! With the `metrics` feature: why a Stream server refused each upgrade,
//! and a client's connections counted apart from a server's. The recorder
//! is the process's, so each test runs alone in a child process.
#![cfg(feature = "metrics")]
// The callback shape users know from tokio-tungstenite.
#![allow(clippy::result_large_err)]

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wavesock::http::{Request, Response, StatusCode};
use wavesock::meter;
use wavesock::{Config, Message};

use crate::support::{self, child, metered};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Each refusal counted under its reason: not an upgrade, an old
/// version, a head over the limit, a peer gone mid-request, a request that
/// never finished in time, the callback's 404 and 403.
#[test]
fn each_refused_upgrade_is_counted_by_its_reason() {
    if !child::alone() {
        return;
    }
    let m = metered::install();
    runtime().block_on(async {
        let (listener, addr) = support::listener().await;
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let config = Config::default()
                        .max_handshake_size(1024)
                        .handshake_timeout(Some(Duration::from_millis(200)));
                    let callback = |req: &Request<()>, resp: Response<()>| {
                        let status = match req.uri().path() {
                            "/missing" => StatusCode::NOT_FOUND,
                            "/private" => StatusCode::FORBIDDEN,
                            _ => return Ok(resp),
                        };
                        let mut refusal = Response::new(None);
                        *refusal.status_mut() = status;
                        Err(refusal)
                    };
                    let _ = wavesock::accept_hdr_async_with_config(tcp, callback, config).await;
                });
            }
        });
        let upgrade = |path: &str, version: u8| {
            format!(
                "GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                 Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: {version}\r\n\r\n"
            )
        };
        let answered = [
            ("GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_owned(), "400"),
            (upgrade("/", 8), "426"),
            (format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "x".repeat(2000)), "431"),
            (upgrade("/missing", 13), "404"),
            (upgrade("/private", 13), "403"),
        ];
        for (request, status) in answered {
            let mut tcp = TcpStream::connect(addr).await.unwrap();
            tcp.write_all(request.as_bytes()).await.unwrap();
            let mut answer = String::new();
            tcp.read_to_string(&mut answer).await.unwrap();
            assert!(answer.starts_with(&format!("HTTP/1.1 {status}")), "{answer}");
        }
        // Gone mid-request, and never finished.
        let mut gone = TcpStream::connect(addr).await.unwrap();
        gone.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        drop(gone);
        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        let mut rest = Vec::new();
        slow.read_to_end(&mut rest).await.unwrap();
        let reasons = [
            "request",
            "version",
            "too_large",
            "not_found",
            "rejected",
            "closed",
            "timeout",
        ];
        let counted = |r: &str| m.counter(meter::UPGRADES_REFUSED, &[("reason", r)]);
        tokio::time::timeout(Duration::from_secs(5), async {
            while reasons.iter().any(|r| counted(r) != 1) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap_or_else(|_| {
            panic!("{:?}", reasons.map(|r| (r, counted(r))));
        });
        assert_eq!(m.counter(meter::CONNECTIONS_ACCEPTED, &[]), 0);
    });
}

/// A client's connection is open under `engine="client"` and counted
/// closed there, never as accepted; the server's under `stream`.
#[test]
fn a_clients_connections_are_counted_apart() {
    if !child::alone() {
        return;
    }
    let m = metered::install();
    runtime().block_on(async {
        let (listener, addr) = support::listener().await;
        let server = tokio::spawn(async move {
            let mut ws = support::accept(&listener, Config::default()).await;
            while let Some(Ok(msg)) = ws.next().await {
                if msg.is_data() {
                    ws.send(msg).await.unwrap();
                }
            }
        });
        let (mut client, _) = wavesock::connect_async(format!("ws://{addr}/"))
            .await
            .unwrap();
        let client_open = [("engine", "client")];
        assert_eq!(m.gauge(meter::CONNECTIONS_OPEN, &client_open), 1.0);
        client.send(Message::text("hi")).await.unwrap();
        assert_eq!(client.next().await.unwrap().unwrap(), Message::text("hi"));
        client.close(None).await.unwrap();
        drop(client);
        server.await.unwrap();
        assert_eq!(m.gauge(meter::CONNECTIONS_OPEN, &client_open), 0.0);
        assert_eq!(
            m.gauge(meter::CONNECTIONS_OPEN, &[("engine", "stream")]),
            0.0
        );
        assert_eq!(m.counter(meter::CONNECTIONS_ACCEPTED, &client_open), 0);
        assert_eq!(
            m.counter(meter::CONNECTIONS_ACCEPTED, &[("engine", "stream")]),
            1
        );
        let closed = |engine, by| {
            m.counter(
                meter::CONNECTIONS_CLOSED,
                &[("engine", engine), ("by", by), ("code", "none")],
            )
        };
        // An empty close frame from the client, answered by the server.
        assert_eq!(closed("client", "local"), 1);
        assert_eq!(closed("stream", "peer"), 1);
        // Both ends' text, once each way.
        assert_eq!(m.counter(meter::MESSAGES_SENT, &[("kind", "text")]), 2);
        assert_eq!(m.counter(meter::MESSAGES_RECEIVED, &[("kind", "text")]), 2);
    });
}

/// One text message sent with `send_pieces` (three chunks) and received
/// piece by piece (`stream_messages`) is counted as one text message each
/// way, its bytes as text: not one message per fragment or piece, nor
/// the continuations under `kind="binary"` (as a break-it round found).
#[test]
fn a_message_in_pieces_is_counted_once_as_its_kind() {
    use wavesock::{Bytes, OpCode};
    if !child::alone() {
        return;
    }
    let m = metered::install();
    runtime().block_on(async {
        let (listener, addr) = support::listener().await;
        let server = tokio::spawn(async move {
            let mut ws = support::accept(&listener, Config::default().stream_messages(true)).await;
            let mut got = Vec::new();
            let mut pieces = ws.next_message_pieces();
            while let Some(piece) = pieces.next().await {
                got.extend_from_slice(&piece.unwrap());
            }
            assert_eq!(got, b"aaaabbbbcccc");
            while ws.next().await.is_some() {}
        });
        let (mut client, _) = wavesock::connect_async(format!("ws://{addr}/"))
            .await
            .unwrap();
        let chunks = ["aaaa", "bbbb", "cccc"]
            .map(|c| Ok::<_, std::io::Error>(Bytes::from_static(c.as_bytes())));
        client
            .send_pieces(OpCode::Text, futures_util::stream::iter(chunks))
            .await
            .unwrap();
        client.close(None).await.unwrap();
        while client.next().await.is_some() {}
        drop(client);
        server.await.unwrap();
        let count = |name, kind| m.counter(name, &[("kind", kind)]);
        let seen = [
            ("sent text", count(meter::MESSAGES_SENT, "text")),
            ("sent binary", count(meter::MESSAGES_SENT, "binary")),
            ("sent text bytes", count(meter::SENT_BYTES, "text")),
            ("received text", count(meter::MESSAGES_RECEIVED, "text")),
            ("received binary", count(meter::MESSAGES_RECEIVED, "binary")),
            ("received text bytes", count(meter::RECEIVED_BYTES, "text")),
        ];
        assert_eq!(
            seen,
            [
                ("sent text", 1),
                ("sent binary", 0),
                ("sent text bytes", 12),
                ("received text", 1),
                ("received binary", 0),
                ("received text bytes", 12),
            ]
        );
    });
}

/// `wavesock_budget_limit_bytes` sums the limits of the budgets alive: a
/// server that replaces its budget (a config reload, a restarted
/// listener) shows the new one's, not the sum of every limit it ever had
/// (as a break-it round found it did).
#[test]
fn the_budget_limit_gauge_forgets_a_dropped_budget() {
    use wavesock::MemoryBudget;
    if !child::alone() {
        return;
    }
    let m = metered::install();
    for _ in 0..3 {
        let budget = MemoryBudget::new(1 << 20);
        meter::record_budget(&budget);
        drop(budget);
    }
    let budget = MemoryBudget::new(1 << 20);
    meter::record_budget(&budget);
    assert_eq!(m.gauge(meter::BUDGET_LIMIT, &[]), f64::from(1 << 20));
}

/// `wavesock_budget_in_use_bytes` comes back to 0 once a Stream server's
/// only connection is gone, its compressor's state (permessage-deflate,
/// charged to the budget) included. (A break-it round found it showing
/// the compressor: the reading state recorded the budget before the core
/// gave it back.)
#[cfg(feature = "deflate")]
#[test]
fn the_budget_gauge_forgets_a_gone_streams_compressor() {
    use wavesock::{DeflateConfig, MemoryBudget};
    if !child::alone() {
        return;
    }
    let m = metered::install();
    runtime().block_on(async {
        let budget = MemoryBudget::new(8 << 20);
        let (listener, addr) = support::listener().await;
        let config = Config::default()
            .memory_budget(budget.clone())
            .deflate(DeflateConfig::default());
        let server = tokio::spawn(async move {
            let mut ws = support::accept(&listener, config).await;
            while let Some(Ok(msg)) = ws.next().await {
                if msg.is_data() {
                    ws.send(msg).await.unwrap();
                }
            }
        });
        let (mut client, _) = wavesock::connect_async_with_config(
            format!("ws://{addr}/"),
            Config::default().deflate(DeflateConfig::default()),
        )
        .await
        .unwrap();
        client
            .send(Message::text("x".repeat(10_000)))
            .await
            .unwrap();
        assert_eq!(client.next().await.unwrap().unwrap().len(), 10_000);
        client.close(None).await.unwrap();
        while client.next().await.is_some() {}
        drop(client);
        server.await.unwrap();
        assert_eq!(budget.in_use(), 0, "the budget holds nothing");
        assert_eq!(
            m.gauge(meter::BUDGET_IN_USE, &[]),
            0.0,
            "wavesock_budget_in_use_bytes once the only connection is gone"
        );
    });
}

/// A message prepared once and sent to three connections, two of them
/// with the same server window and one with a smaller (the client asked
/// `server_max_window_bits=10`), is compressed, and counted in
/// `wavesock_deflate_sent_bytes_total`, once per window size: twice, not
/// three times.
#[cfg(feature = "deflate")]
#[test]
fn a_prepared_message_counts_once_per_window_in_deflate_bytes() {
    use wavesock::DeflateConfig;
    if !child::alone() {
        return;
    }
    let m = metered::install();
    runtime().block_on(async {
        let news = wavesock::PreparedMessage::new(&Message::text("news ".repeat(4_000))).unwrap();
        let (listener, addr) = support::listener().await;
        let mut pairs = Vec::new();
        for offer in [
            DeflateConfig::default(),
            DeflateConfig::default().server_max_window_bits(Some(10)),
            DeflateConfig::default(),
        ] {
            let client = wavesock::connect_async_with_config(
                format!("ws://{addr}/"),
                Config::default().deflate(offer),
            );
            let server = support::accept(
                &listener,
                Config::default().deflate(DeflateConfig::default()),
            );
            let ((client, _), server) =
                futures_util::future::join(async { client.await.unwrap() }, server).await;
            pairs.push((client, server));
        }
        let before = m.counter(
            wavesock::meter::DEFLATE_SENT_BYTES,
            &[("form", "uncompressed")],
        );
        for (_, server) in &mut pairs {
            server.send_prepared(&news).await.unwrap();
        }
        for (client, _) in &mut pairs {
            assert_eq!(client.next().await.unwrap().unwrap().len(), 20_000);
        }
        let moved = m.counter(
            wavesock::meter::DEFLATE_SENT_BYTES,
            &[("form", "uncompressed")],
        ) - before;
        assert_eq!(moved, 40_000, "once for each of the two window sizes");
    });
}
