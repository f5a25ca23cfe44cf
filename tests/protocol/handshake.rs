//! The server side of the opening handshake, over loopback TCP and in-memory

// Callbacks spell out tokio-tungstenite's `Result<Response<()>, Response<Option<String>>>`.
#![allow(clippy::result_large_err)]
//! streams.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use http::{Request, Response, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wavesock::handshake::server::ErrorResponse;
use wavesock::{Config, Error, HandshakeError, Message, Subprotocols};

use crate::support::{ACCEPT, Counting, masked_frame, read_head, read_to_end, request};

/// A listener on a free loopback port and a client connected to it.
async fn pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (client, server) = tokio::join!(TcpStream::connect(addr), listener.accept());
    (client.unwrap(), server.unwrap().0)
}

fn handshake_error(r: wavesock::Result<impl std::fmt::Debug>) -> HandshakeError {
    match r {
        Err(Error::Handshake(e)) => e,
        other => panic!("expected a handshake error, got {other:?}"),
    }
}

#[tokio::test]
async fn rfc_request_is_answered_with_101_and_the_accept_key() {
    let (mut client, server) = pair().await;
    let server = tokio::spawn(wavesock::accept_async(server));
    client.write_all(request("").as_bytes()).await.unwrap();
    let head = read_head(&mut client).await;
    assert!(
        head.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
        "{head}"
    );
    assert!(
        head.contains(&format!("sec-websocket-accept: {ACCEPT}\r\n")),
        "{head}"
    );
    assert!(head.to_ascii_lowercase().contains("upgrade: websocket\r\n"));
    assert!(server.await.unwrap().is_ok());
}

#[tokio::test]
async fn request_split_across_many_reads() {
    // The server sees the request one byte per read; the client also writes
    // it in small pieces.
    let (client, server) = tokio::io::duplex(64);
    let (server, read) = Counting::new(server, 1);
    let server = tokio::spawn(wavesock::accept_async(server));
    let (mut cr, mut cw) = tokio::io::split(client);
    let raw = request("");
    for piece in raw.as_bytes().chunks(3) {
        cw.write_all(piece).await.unwrap();
        tokio::task::yield_now().await;
    }
    let head = read_head(&mut cr).await;
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    let mut ws = server.await.unwrap().unwrap();
    // It read exactly the request, no more.
    assert_eq!(read.load(Ordering::SeqCst), raw.len());
    cw.write_all(&masked_frame(0x1, b"after")).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("after"));
}

#[tokio::test]
async fn pipelined_first_frame_is_decoded() {
    let (mut client, server) = pair().await;
    let mut bytes = request("").into_bytes();
    bytes.extend_from_slice(&masked_frame(0x1, b"first"));
    bytes.extend_from_slice(&masked_frame(0x2, b"second"));
    // Request and frames in one write, before the server even starts.
    client.write_all(&bytes).await.unwrap();
    let mut ws = wavesock::accept_async(server).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("first"));
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        Message::binary(&b"second"[..])
    );
    ws.send(Message::text("pong")).await.unwrap();
    let head = read_head(&mut client).await;
    assert!(head.starts_with("HTTP/1.1 101 "));
    let mut frame = [0u8; 6];
    client.read_exact(&mut frame).await.unwrap();
    assert_eq!(&frame, b"\x81\x04pong");
}

#[tokio::test]
async fn header_flood_is_refused_at_the_cap() {
    let (client, server) = tokio::io::duplex(16 << 10);
    let (server, read) = Counting::new(server, usize::MAX);
    let config = Config::default().max_handshake_size(4096);
    let server = tokio::spawn(wavesock::accept_async_with_config(server, config));
    let (mut cr, mut cw) = tokio::io::split(client);
    let writer = tokio::spawn(async move {
        // One 1 MiB header: no line end for the parser to stop at.
        cw.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-Flood: ")
            .await?;
        cw.write_all(&vec![b'a'; 1 << 20]).await?;
        cw.write_all(b"\r\n\r\n").await
    });
    let err = handshake_error(server.await.unwrap());
    assert!(matches!(err, HandshakeError::TooLarge(4096)), "{err:?}");
    // Memory stayed flat: the server never read past its cap.
    assert!(
        read.load(Ordering::SeqCst) <= 4096,
        "{}",
        read.load(Ordering::SeqCst)
    );
    let answer = read_to_end(&mut cr).await;
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
    // The flood could not be written: the server stopped reading and left.
    assert!(writer.await.unwrap().is_err());
}

#[tokio::test]
async fn header_flood_over_tcp_reads_at_most_the_cap() {
    let (mut client, server) = pair().await;
    let (server, read) = Counting::new(server, usize::MAX);
    let server = tokio::spawn(wavesock::accept_async(server));
    let writer = tokio::spawn(async move {
        let mut flood = b"GET / HTTP/1.1\r\n".to_vec();
        while flood.len() < 1 << 20 {
            flood.extend_from_slice(b"X-Flood-Header-Name: some value\r\n");
        }
        let _ = client.write_all(&flood).await;
        client
    });
    let err = handshake_error(server.await.unwrap());
    // Default limits: 64 headers come before 8 KiB of them.
    assert!(
        matches!(
            err,
            HandshakeError::Malformed(_) | HandshakeError::TooLarge(_)
        ),
        "{err:?}"
    );
    assert!(read.load(Ordering::SeqCst) <= Config::default().handshake.max_size);
    drop(writer);
}

#[tokio::test]
async fn too_many_headers_get_400() {
    let (client, server) = tokio::io::duplex(64 << 10);
    let config = Config::default().max_headers(16);
    let server = tokio::spawn(wavesock::accept_async_with_config(server, config));
    let (mut cr, mut cw) = tokio::io::split(client);
    let extra: String = (0..20).map(|i| format!("X-{i}: v\r\n")).collect();
    cw.write_all(request(&extra).as_bytes()).await.unwrap();
    let err = handshake_error(server.await.unwrap());
    assert_eq!(err.status(), Some(StatusCode::BAD_REQUEST));
    assert!(read_to_end(&mut cr).await.starts_with("HTTP/1.1 400 "));
}

#[tokio::test(start_paused = true)]
async fn unfinished_request_times_out() {
    let (client, server) = tokio::io::duplex(1024);
    let config = Config::default().handshake_timeout(Some(Duration::from_secs(5)));
    let server = tokio::spawn(wavesock::accept_async_with_config(server, config));
    let (_cr, mut cw) = tokio::io::split(client);
    // Half a request, then nothing: the slow-loris pattern.
    cw.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let err = handshake_error(server.await.unwrap());
    assert!(matches!(err, HandshakeError::Timeout), "{err:?}");
    assert_eq!(started.elapsed().as_secs(), 5);
}

#[tokio::test(start_paused = true)]
async fn silent_client_times_out_with_default_config() {
    let (_client, server) = tokio::io::duplex(1024);
    let err = handshake_error(wavesock::accept_async(server).await);
    assert!(matches!(err, HandshakeError::Timeout), "{err:?}");
}

#[tokio::test]
async fn client_leaving_mid_request_is_connection_closed() {
    let (mut client, server) = pair().await;
    client.write_all(b"GET / HTTP/1.1\r\nHo").await.unwrap();
    drop(client);
    let err = handshake_error(wavesock::accept_async(server).await);
    assert!(matches!(err, HandshakeError::ConnectionClosed), "{err:?}");
}

#[tokio::test]
async fn header_names_and_tokens_in_any_case() {
    let variants = [
        "GET / HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n",
        "GET / HTTP/1.1\r\nHOST: x\r\nUPGRADE: WEBSOCKET\r\nCONNECTION: UPGRADE\r\nSEC-WEBSOCKET-KEY: dGhlIHNhbXBsZSBub25jZQ==\r\nSEC-WEBSOCKET-VERSION: 13\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: WebSocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: h2c, websocket\r\nConnection: keep-alive\r\nConnection: upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    ];
    for raw in variants {
        let (mut client, server) = pair().await;
        client.write_all(raw.as_bytes()).await.unwrap();
        assert!(wavesock::accept_async(server).await.is_ok(), "{raw}");
        let head = read_head(&mut client).await;
        assert!(head.contains(ACCEPT), "{raw}");
    }
}

/// Sends `raw`, expects a refusal with `status`; returns the error and what
/// the client received.
async fn refused(raw: &str, status: u16) -> (HandshakeError, String) {
    let (mut client, server) = pair().await;
    client.write_all(raw.as_bytes()).await.unwrap();
    let err = handshake_error(wavesock::accept_async(server).await);
    let answer = read_to_end(&mut client).await;
    assert!(
        answer.starts_with(&format!("HTTP/1.1 {status} ")),
        "{raw:?} got {answer:?}"
    );
    assert_eq!(err.status().map(|s| s.as_u16()), Some(status), "{raw:?}");
    (err, answer)
}

#[tokio::test]
async fn method_other_than_get_gets_405() {
    let raw = request("").replacen("GET", "POST", 1);
    let (err, _) = refused(&raw, 405).await;
    assert!(matches!(err, HandshakeError::MethodNotAllowed(m) if m == "POST"));
}

#[tokio::test]
async fn post_upgrade_gets_405_with_allow_get() {
    // RFC 9110 §15.5.6: a 405 response must carry Allow.
    let raw = request("").replacen("GET", "POST", 1);
    let (_, answer) = refused(&raw, 405).await;
    let head = answer.split("\r\n\r\n").next().unwrap();
    let allow: Vec<&str> = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(name, _)| name.eq_ignore_ascii_case("allow"))
        .map(|(_, value)| value.trim())
        .collect();
    assert_eq!(allow, ["GET"], "{answer}");
}

#[tokio::test]
async fn wrong_version_gets_426_naming_13() {
    let raw = request("").replace("Sec-WebSocket-Version: 13", "Sec-WebSocket-Version: 8");
    let (err, answer) = refused(&raw, 426).await;
    assert!(matches!(err, HandshakeError::UnsupportedVersion));
    assert!(answer.contains("sec-websocket-version: 13\r\n"), "{answer}");
    // A missing version is the same failure.
    let raw = request("").replace("Sec-WebSocket-Version: 13\r\n", "");
    refused(&raw, 426).await;
}

#[tokio::test]
async fn missing_or_invalid_key_gets_400() {
    let without = request("").replace("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", "");
    let (err, _) = refused(&without, 400).await;
    assert!(matches!(
        err,
        HandshakeError::BadHeader {
            name: "Sec-WebSocket-Key",
            ..
        }
    ));
    for bad in [
        "short",
        "dGhlIHNhbXBsZSBub25jZQ",
        "aGVsbG8gd29ybGQgaGVsbG8gd29ybGQ=",
    ] {
        let raw = request("").replace("dGhlIHNhbXBsZSBub25jZQ==", bad);
        refused(&raw, 400).await;
    }
    // Two keys are as bad as none.
    refused(
        &request("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"),
        400,
    )
    .await;
}

#[tokio::test]
async fn missing_upgrade_connection_or_host_gets_400() {
    refused(&request("").replace("Upgrade: websocket\r\n", ""), 400).await;
    refused(
        &request("").replace("Connection: Upgrade", "Connection: keep-alive"),
        400,
    )
    .await;
    refused(
        &request("").replace("Host: server.example.com\r\n", ""),
        400,
    )
    .await;
    refused(&request("").replace("HTTP/1.1", "HTTP/1.0"), 400).await;
}

#[tokio::test]
async fn garbage_gets_400() {
    let (err, _) = refused("\x16\x03\x01\x02\x00\x01\x00\x01\x7c\x03\x03\r\n\r\n", 400).await;
    assert!(matches!(err, HandshakeError::Malformed(_)));
}

#[tokio::test]
async fn callback_sees_the_request_and_adds_headers() {
    let (mut client, server) = pair().await;
    client
        .write_all(
            request("Authorization: Bearer t0k3n\r\nCookie: a=b\r\n")
                .replace("/chat", "/room/7?user=ann")
                .as_bytes(),
        )
        .await
        .unwrap();
    let callback =
        |req: &Request<()>, mut resp: Response<()>| -> Result<Response<()>, ErrorResponse> {
            assert_eq!(req.method(), http::Method::GET);
            assert_eq!(req.uri().path(), "/room/7");
            assert_eq!(req.uri().query(), Some("user=ann"));
            assert_eq!(req.headers()["authorization"], "Bearer t0k3n");
            assert_eq!(req.headers()["cookie"], "a=b");
            resp.headers_mut()
                .insert("set-cookie", "session=1".parse().unwrap());
            Ok(resp)
        };
    let _ws = wavesock::accept_hdr_async(server, callback).await.unwrap();
    let head = read_head(&mut client).await;
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    assert!(head.contains("set-cookie: session=1\r\n"), "{head}");
}

#[tokio::test]
async fn callback_refusal_is_written_as_given() {
    let (mut client, server) = pair().await;
    client.write_all(request("").as_bytes()).await.unwrap();
    let callback = |_: &Request<()>, _: Response<()>| -> Result<Response<()>, ErrorResponse> {
        Err(Response::builder()
            .status(StatusCode::FORBIDDEN)
            .header("x-reason", "banned")
            .body(Some("go away".to_string()))
            .unwrap())
    };
    let err = handshake_error(wavesock::accept_hdr_async(server, callback).await);
    assert!(
        matches!(err, HandshakeError::Refused(StatusCode::FORBIDDEN)),
        "{err:?}"
    );
    let answer = read_to_end(&mut client).await;
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    assert!(answer.contains("x-reason: banned\r\n"), "{answer}");
    assert!(answer.contains("content-length: 7\r\n"), "{answer}");
    assert!(answer.ends_with("\r\n\r\ngo away"), "{answer}");
}

#[tokio::test]
async fn callback_cannot_break_the_handshake() {
    let (mut client, server) = pair().await;
    client.write_all(request("").as_bytes()).await.unwrap();
    let callback =
        |_: &Request<()>, mut resp: Response<()>| -> Result<Response<()>, ErrorResponse> {
            *resp.status_mut() = StatusCode::OK;
            resp.headers_mut().remove("sec-websocket-accept");
            Ok(resp)
        };
    wavesock::accept_hdr_async(server, callback).await.unwrap();
    let head = read_head(&mut client).await;
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    assert!(head.contains(ACCEPT), "{head}");
}

#[tokio::test]
async fn callback_is_not_called_for_invalid_requests() {
    let (mut client, server) = pair().await;
    client
        .write_all(
            request("")
                .replace("Sec-WebSocket-Version: 13", "Sec-WebSocket-Version: 7")
                .as_bytes(),
        )
        .await
        .unwrap();
    let callback = |_: &Request<()>, _: Response<()>| -> Result<Response<()>, ErrorResponse> {
        panic!("called for an invalid request")
    };
    let err = handshake_error(wavesock::accept_hdr_async(server, callback).await);
    assert!(matches!(err, HandshakeError::UnsupportedVersion));
}

/// Callbacks as written for tokio-tungstenite: only the path of the names
/// changes, from `tungstenite::handshake::server` to
/// `wavesock::handshake::server`.
mod tungstenite_style {
    use http::StatusCode;
    use wavesock::handshake::server::{ErrorResponse, Request, Response};

    pub fn callback(req: &Request, mut resp: Response) -> Result<Response, ErrorResponse> {
        if req.uri().path() != "/ok" {
            let mut refusal = ErrorResponse::new(Some("wrong path".into()));
            *refusal.status_mut() = StatusCode::NOT_FOUND;
            return Err(refusal);
        }
        resp.headers_mut()
            .insert("x-checked", "yes".parse().unwrap());
        Ok(resp)
    }

    pub async fn accept_with_closure(
        tcp: tokio::net::TcpStream,
    ) -> wavesock::Result<wavesock::WebSocketStream<tokio::net::TcpStream>> {
        let closure = |req: &Request, mut resp: Response| -> Result<Response, ErrorResponse> {
            let room = req.uri().path().trim_start_matches('/').to_owned();
            resp.headers_mut().insert("x-room", room.parse().unwrap());
            Ok(resp)
        };
        wavesock::accept_hdr_async(tcp, closure).await
    }
}

#[tokio::test]
async fn tungstenite_style_callbacks_compile_and_run() {
    let (mut client, server) = pair().await;
    let server = tokio::spawn(tungstenite_style::accept_with_closure(server));
    client.write_all(request("").as_bytes()).await.unwrap();
    let head = read_head(&mut client).await;
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    assert!(head.contains("x-room: chat\r\n"), "{head}");
    server.await.unwrap().unwrap();

    let (mut client, server) = pair().await;
    let server = tokio::spawn(wavesock::accept_hdr_async(
        server,
        tungstenite_style::callback,
    ));
    client
        .write_all(request("").replacen("GET /chat", "GET /ok", 1).as_bytes())
        .await
        .unwrap();
    let head = read_head(&mut client).await;
    assert!(head.contains("x-checked: yes\r\n"), "{head}");
    server.await.unwrap().unwrap();

    // Its refusal is written as given.
    let (mut client, server) = pair().await;
    let server = tokio::spawn(wavesock::accept_hdr_async(
        server,
        tungstenite_style::callback,
    ));
    client.write_all(request("").as_bytes()).await.unwrap();
    let answer = read_to_end(&mut client).await;
    assert!(answer.starts_with("HTTP/1.1 404 "), "{answer}");
    assert!(answer.ends_with("wrong path"), "{answer}");
    let err = handshake_error(server.await.unwrap());
    assert!(matches!(
        err,
        HandshakeError::Refused(StatusCode::NOT_FOUND)
    ));
}

#[tokio::test]
async fn async_callback_accepts_and_refuses() {
    async fn lookup(token: &str) -> bool {
        tokio::time::sleep(Duration::from_millis(5)).await;
        token == "Bearer good"
    }
    for (token, accepted) in [("good", true), ("bad", false)] {
        let (mut client, server) = pair().await;
        client
            .write_all(request(&format!("Authorization: Bearer {token}\r\n")).as_bytes())
            .await
            .unwrap();
        let result = wavesock::accept_async_callback(
            server,
            |req: Request<()>, resp: Response<()>| async move {
                let auth = req
                    .headers()
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default();
                if lookup(auth).await {
                    Ok(resp)
                } else {
                    let mut refusal = Response::new(Some("bad token".to_string()));
                    *refusal.status_mut() = StatusCode::UNAUTHORIZED;
                    Err(refusal)
                }
            },
        )
        .await;
        let answer = read_head(&mut client).await;
        if accepted {
            assert!(result.is_ok());
            assert!(answer.starts_with("HTTP/1.1 101 "), "{answer}");
        } else {
            assert!(matches!(
                handshake_error(result),
                HandshakeError::Refused(StatusCode::UNAUTHORIZED)
            ));
            assert!(answer.starts_with("HTTP/1.1 401 "), "{answer}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn handshake_timeout_covers_a_slow_async_callback() {
    let (client, server) = tokio::io::duplex(4096);
    let (_cr, mut cw) = tokio::io::split(client);
    cw.write_all(request("").as_bytes()).await.unwrap();
    let config = Config::default().handshake_timeout(Some(Duration::from_secs(1)));
    let result = wavesock::accept_async_callback_with_config(
        server,
        |_req, resp| async move {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(resp)
        },
        config,
    )
    .await;
    assert!(matches!(handshake_error(result), HandshakeError::Timeout));
}

#[tokio::test]
async fn subprotocol_negotiation_server_preference_wins() {
    let cases = [
        ("chat.v1, chat.v2", Some("chat.v2")),
        ("chat.v2, chat.v1", Some("chat.v2")),
        ("chat.v1", Some("chat.v1")),
        ("mqtt", None),
    ];
    for (offered, chosen) in cases {
        let (mut client, server) = pair().await;
        client
            .write_all(request(&format!("Sec-WebSocket-Protocol: {offered}\r\n")).as_bytes())
            .await
            .unwrap();
        let protocols = Subprotocols::new(["chat.v2", "chat.v1"]);
        wavesock::accept_hdr_async(server, protocols).await.unwrap();
        let head = read_head(&mut client).await;
        match chosen {
            Some(p) => assert!(
                head.contains(&format!("sec-websocket-protocol: {p}\r\n")),
                "{head}"
            ),
            None => assert!(!head.contains("sec-websocket-protocol"), "{head}"),
        }
    }
}

#[tokio::test]
async fn required_subprotocol_missing_gets_400() {
    let (mut client, server) = pair().await;
    client
        .write_all(request("Sec-WebSocket-Protocol: mqtt\r\n").as_bytes())
        .await
        .unwrap();
    let protocols = Subprotocols::new(["chat"]).required(true);
    let err = handshake_error(wavesock::accept_hdr_async(server, protocols).await);
    assert!(matches!(
        err,
        HandshakeError::Refused(StatusCode::BAD_REQUEST)
    ));
    assert!(read_to_end(&mut client).await.starts_with("HTTP/1.1 400 "));
}

#[tokio::test]
async fn invalid_config_is_an_error_not_a_panic() {
    let (_client, server) = tokio::io::duplex(64);
    let config = Config::default().max_headers(0);
    assert!(matches!(
        wavesock::accept_async_with_config(server, config).await,
        Err(Error::InvalidConfig(_))
    ));
}

mod split_reads {
    use super::*;
    use proptest::prelude::*;
    use wavesock::handshake::server::{accept_response, write_response};

    /// Runs the server over a scripted stream that delivers `request +
    /// frame` in the given chunks and expects exactly the 101 response.
    fn accept_in_chunks(cuts: Vec<usize>) -> Message {
        let head = request("").into_bytes();
        let mut input = head.clone();
        input.extend_from_slice(&masked_frame(0x1, b"pipelined"));
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % input.len()).collect();
        cuts.push(head.len());
        cuts.push(input.len());
        cuts.sort_unstable();
        cuts.dedup();
        let mut response = Vec::new();
        write_response(&accept_response(ACCEPT), &[], &mut response);
        let mut builder = tokio_test::io::Builder::new();
        let mut start = 0;
        for end in cuts.into_iter().filter(|&c| c > 0) {
            builder.read(&input[start..end]);
            if end == head.len() {
                // The server answers once the head is complete, before it
                // reads any further.
                builder.write(&response);
            }
            start = end;
        }
        let mock = builder.build();
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let mut ws = wavesock::accept_async(mock).await.unwrap();
                ws.next().await.unwrap().unwrap()
            })
    }

    #[test]
    fn one_byte_at_a_time() {
        let all: Vec<usize> = (1..300).collect();
        assert_eq!(accept_in_chunks(all), Message::text("pipelined"));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn any_chunking_gives_the_same_result(cuts in proptest::collection::vec(0usize..1000, 0..40)) {
            prop_assert_eq!(accept_in_chunks(cuts), Message::text("pipelined"));
        }
    }
}
