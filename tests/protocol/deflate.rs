//! permessage-deflate end to end: negotiation through the real handshakes,
//! RSV1 rules on the wire, compression thresholds and opt-outs, context
//! takeover over many messages.
#![cfg(feature = "deflate")]

use crate::support;

use bytes::BytesMut;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use wavesock::{
    CloseCode, Config, DeflateConfig, DeflateParams, Error, Message, Role, WebSocketStream,
};

use crate::support::{masked, read_frame};

/// "Hello" compressed (RFC 7692 §7.2.3.1), tail stripped.
const HELLO: &[u8] = &[0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00];

fn on() -> Config {
    Config::default().deflate(DeflateConfig::default())
}

/// A client and a server that went through the real handshakes in memory;
/// also returns the server's `Sec-WebSocket-Extensions` answer.
async fn pair(
    client: Config,
    server: Config,
) -> (
    WebSocketStream<DuplexStream>,
    WebSocketStream<DuplexStream>,
    Option<String>,
) {
    let (c, s) = tokio::io::duplex(1 << 20);
    let accept = tokio::spawn(wavesock::accept_async_with_config(s, server));
    let (ws, resp) = wavesock::client_async_with_config("ws://localhost/", c, client)
        .await
        .unwrap();
    let answer = resp
        .headers()
        .get("sec-websocket-extensions")
        .map(|v| v.to_str().unwrap().to_owned());
    (ws, accept.await.unwrap().unwrap(), answer)
}

/// A server stream with compression on, and the raw client end.
fn raw_server(
    params: DeflateParams,
    config: DeflateConfig,
) -> (WebSocketStream<DuplexStream>, DuplexStream) {
    let (a, b) = tokio::io::duplex(1 << 20);
    let ws = WebSocketStream::from_raw_socket(a, Role::Server, Config::default())
        .unwrap()
        .with_deflate(params, &config);
    (ws, b)
}

/// Text of a given size that compresses like real data (not just zeros).
fn text(n: usize, seed: usize) -> String {
    let words = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "κόσμε",
        "epsilon",
        "{\"id\":",
        "},",
    ];
    let mut s = String::with_capacity(n + 16);
    let mut i = seed;
    while s.len() < n {
        s.push_str(words[i % words.len()]);
        s.push(' ');
        i = i.wrapping_mul(31).wrapping_add(7);
    }
    while s.len() > n {
        s.pop();
    }
    s
}

#[tokio::test]
async fn both_sides_negotiate_and_echo_all_sizes() {
    let (mut client, mut server, answer) = pair(on(), on()).await;
    assert_eq!(answer.as_deref(), Some("permessage-deflate"));
    let echo = tokio::spawn(async move {
        while let Some(Ok(m)) = server.next().await {
            if m.is_data() {
                server.send(m).await.unwrap();
            }
        }
    });
    for (i, n) in [0, 1, 31, 32, 100, 4096, 65_537, 1 << 20]
        .into_iter()
        .enumerate()
    {
        let t = Message::text(text(n, i));
        client.send(t.clone()).await.unwrap();
        assert_eq!(client.next().await.unwrap().unwrap(), t);
        let b = Message::binary(text(n, i + 100).into_bytes());
        client.send(b.clone()).await.unwrap();
        assert_eq!(client.next().await.unwrap().unwrap(), b);
    }
    client.close(None).await.unwrap();
    echo.await.unwrap();
}

#[tokio::test]
async fn every_parameter_works_end_to_end() {
    let variants = [
        DeflateConfig::default().server_no_context_takeover(true),
        DeflateConfig::default().client_no_context_takeover(true),
        DeflateConfig::default().server_max_window_bits(Some(8)),
        DeflateConfig::default().client_max_window_bits(Some(8)),
        DeflateConfig::default()
            .server_max_window_bits(Some(9))
            .client_max_window_bits(Some(10))
            .server_no_context_takeover(true)
            .client_no_context_takeover(true)
            .level(9),
        DeflateConfig::default().level(0),
    ];
    for client_cfg in &variants {
        for server_cfg in &variants {
            let client = on().deflate(client_cfg.clone().compression_threshold(0));
            let server = on().deflate(server_cfg.clone().compression_threshold(0));
            let (mut c, mut s, answer) = pair(client, server).await;
            let answer = answer.unwrap_or_default();
            if server_cfg.client_max_window_bits.is_some()
                || client_cfg.client_max_window_bits.is_some()
            {
                assert!(answer.contains("client_max_window_bits="), "{answer}");
            }
            if client_cfg.server_max_window_bits.is_some()
                || server_cfg.server_max_window_bits.is_some()
            {
                assert!(answer.contains("server_max_window_bits="), "{answer}");
            }
            for i in 0..20 {
                // Longer than a 256-byte window, with repeats far apart.
                let m = Message::text(text(3000, i % 3));
                c.send(m.clone()).await.unwrap();
                assert_eq!(s.next().await.unwrap().unwrap(), m);
                s.send(m.clone()).await.unwrap();
                assert_eq!(c.next().await.unwrap().unwrap(), m);
            }
        }
    }
}

#[tokio::test]
async fn a_server_without_compression_declines_politely() {
    let (mut c, mut s, answer) = pair(on(), Config::default()).await;
    assert_eq!(answer, None);
    c.send(Message::text(text(1000, 1))).await.unwrap();
    assert_eq!(
        s.next().await.unwrap().unwrap(),
        Message::text(text(1000, 1))
    );
    // A client that did not offer is never answered with the extension.
    let (_, _, answer) = pair(Config::default(), on()).await;
    assert_eq!(answer, None);
    // Nor one whose offers the server cannot meet.
    let strict = on().deflate(DeflateConfig::default().client_max_window_bits(Some(9)));
    let (c, s) = tokio::io::duplex(1 << 16);
    let accept = tokio::spawn(wavesock::accept_async_with_config(s, strict));
    let mut raw = c;
    raw.write_all(
        b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
          Sec-WebSocket-Extensions: permessage-deflate, permessage-deflate; server_max_window_bits=7\r\n\r\n",
    )
    .await
    .unwrap();
    let mut head = vec![0; 512];
    let n = raw.read(&mut head).await.unwrap();
    let head = String::from_utf8_lossy(&head[..n]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(!head.contains("sec-websocket-extensions"), "{head}");
    accept.await.unwrap().unwrap();
}

/// A server answering a client's handshake with `extensions`.
async fn client_against(extensions: &str, client: Config) -> Result<(), Error> {
    let (c, mut s) = tokio::io::duplex(1 << 16);
    let extensions = extensions.to_owned();
    let server = tokio::spawn(async move {
        let mut buf = BytesMut::new();
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            if s.read_buf(&mut buf).await.unwrap() == 0 {
                return;
            }
        }
        let req = String::from_utf8_lossy(&buf).to_string();
        let key = req
            .lines()
            .find_map(|l| l.strip_prefix("sec-websocket-key: "))
            .unwrap()
            .trim();
        let accept = wavesock::handshake::derive_accept_key(key.as_bytes());
        let ext = if extensions.is_empty() {
            String::new()
        } else {
            format!("Sec-WebSocket-Extensions: {extensions}\r\n")
        };
        let resp = format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: {accept}\r\n{ext}\r\n"
        );
        let _ = s.write_all(resp.as_bytes()).await;
        let _ = s.read_buf(&mut buf).await;
    });
    let r = wavesock::client_async_with_config("ws://localhost/", c, client).await;
    server.abort();
    r.map(drop)
}

#[tokio::test]
async fn a_client_fails_on_answers_it_did_not_ask_for() {
    let cfg = on().deflate(DeflateConfig::default().server_max_window_bits(Some(10)));
    assert!(
        client_against("permessage-deflate; server_max_window_bits=10", cfg.clone())
            .await
            .is_ok()
    );
    assert!(
        client_against("", cfg.clone()).await.is_ok(),
        "a decline is fine"
    );
    for bad in [
        "permessage-deflate",                            // asked limit ignored
        "permessage-deflate; server_max_window_bits=11", // above what was asked
        "permessage-deflate; server_max_window_bits=10; server_max_window_bits=10",
        "permessage-deflate; server_max_window_bits=10; mystery",
        "permessage-deflate; server_max_window_bits=10, permessage-deflate; server_max_window_bits=10",
        "x-webkit-deflate-frame",
    ] {
        let e = client_against(bad, cfg.clone()).await.unwrap_err();
        assert!(matches!(e, Error::Handshake(_)), "{bad}: {e}");
    }
    // Without compression configured, any extension is refused.
    let e = client_against("permessage-deflate", Config::default())
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Handshake(_)), "{e}");
}

async fn close_code_for(frames: &[Vec<u8>], negotiated: bool) -> u16 {
    let (a, mut peer) = tokio::io::duplex(1 << 20);
    let cfg = Config::default()
        .max_message_size(1 << 16)
        .max_frame_size(1 << 16);
    let mut ws = WebSocketStream::from_raw_socket(a, Role::Server, cfg).unwrap();
    if negotiated {
        ws = ws.with_deflate(DeflateParams::default(), &DeflateConfig::default());
    }
    for f in frames {
        peer.write_all(f).await.unwrap();
    }
    let err = loop {
        match ws.next().await.unwrap() {
            Ok(_) => continue,
            Err(e) => break e,
        }
    };
    let mut buf = BytesMut::new();
    let (b0, payload) = read_frame(&mut peer, &mut buf).await.unwrap();
    assert_eq!(b0, 0x88);
    let code = u16::from_be_bytes([payload[0], payload[1]]);
    assert_eq!(err.close_code(), Some(CloseCode(code)), "{err}");
    code
}

#[tokio::test]
async fn rsv1_rules() {
    // Compressed, single frame and fragmented, with a ping in between.
    let (mut ws, mut peer) = raw_server(DeflateParams::default(), DeflateConfig::default());
    peer.write_all(&masked(0xC1, HELLO)).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("Hello"));
    peer.write_all(&masked(0x41, &HELLO[..3])).await.unwrap();
    peer.write_all(&masked(0x89, b"p")).await.unwrap();
    peer.write_all(&masked(0x00, &HELLO[3..5])).await.unwrap();
    peer.write_all(&masked(0x80, &HELLO[5..])).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::Ping("p".into()));
    let m = ws.next().await.unwrap().unwrap();
    // With context takeover the second "Hello" may refer to the first, but
    // this one was compressed on its own, which inflating must accept too.
    assert_eq!(m, Message::text("Hello"));
    // Uncompressed messages stay allowed on a compressed connection.
    peer.write_all(&masked(0x82, b"raw")).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::binary("raw"));

    // RSV1 on a continuation, on control frames, or unnegotiated: 1002.
    assert_eq!(
        close_code_for(
            &[masked(0x41, &HELLO[..3]), masked(0xC0, &HELLO[3..])],
            true
        )
        .await,
        1002
    );
    assert_eq!(
        close_code_for(&[masked(0x01, b"a"), masked(0xC0, b"b")], true).await,
        1002
    );
    assert_eq!(close_code_for(&[masked(0xC9, b"")], true).await, 1002);
    assert_eq!(close_code_for(&[masked(0xCA, b"")], true).await, 1002);
    assert_eq!(
        close_code_for(&[masked(0xC8, &[0x03, 0xE8])], true).await,
        1002
    );
    assert_eq!(close_code_for(&[masked(0xC1, HELLO)], false).await, 1002);
    // RSV2 and RSV3 stay reserved.
    assert_eq!(close_code_for(&[masked(0xE1, HELLO)], true).await, 1002);
    assert_eq!(close_code_for(&[masked(0xD1, HELLO)], true).await, 1002);
    // A new message while a compressed one is in progress.
    assert_eq!(
        close_code_for(&[masked(0x41, &HELLO[..3]), masked(0xC1, HELLO)], true).await,
        1002
    );
    // Garbage that does not inflate.
    assert_eq!(
        close_code_for(&[masked(0xC2, &[0xff, 0xff, 0xff])], true).await,
        1002
    );
}

#[tokio::test]
async fn compressed_text_is_checked_as_it_inflates() {
    // Invalid UTF-8 inside compressed text: 1007, before the message ends.
    let mut c = flate2::Compress::new(flate2::Compression::default(), false);
    let mut bad = "κόσμε".repeat(100).into_bytes();
    bad.extend_from_slice(&[0xED, 0xA0, 0x80]);
    // Then enough varied text that the bad bytes sit early in the stream.
    bad.extend(text(20_000, 5).into_bytes());
    let mut wire = Vec::with_capacity(20_000);
    c.compress_vec(&bad, &mut wire, flate2::FlushCompress::Sync)
        .unwrap();
    wire.truncate(wire.len() - 4);
    // Only the first fragment is sent; the rest never comes.
    let half = wire.len() / 2;
    assert_eq!(
        close_code_for(&[masked(0x41, &wire[..half])], true).await,
        1007
    );
    // A code point cut at the end of the message.
    let mut cut = Vec::with_capacity(64);
    let mut c = flate2::Compress::new(flate2::Compression::default(), false);
    c.compress_vec(&[b'a', 0xCE], &mut cut, flate2::FlushCompress::Sync)
        .unwrap();
    cut.truncate(cut.len() - 4);
    assert_eq!(close_code_for(&[masked(0xC1, &cut)], true).await, 1007);
}

/// Reads the server's frames and reports (RSV1 set, payload length) per frame.
async fn wire_frames(peer: &mut DuplexStream, count: usize) -> Vec<(bool, usize)> {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for _ in 0..count {
        let (b0, payload) = read_frame(peer, &mut buf).await.unwrap();
        out.push((b0 & 0x40 != 0, payload.len()));
    }
    out
}

#[tokio::test]
async fn threshold_and_opt_out() {
    let cfg = DeflateConfig::default().compression_threshold(100);
    let (mut ws, mut peer) = raw_server(DeflateParams::default(), cfg);
    let long = text(5000, 3);
    ws.send(Message::text(text(99, 1))).await.unwrap();
    ws.send(Message::text(text(100, 1))).await.unwrap();
    ws.send(Message::text(long.clone())).await.unwrap();
    ws.send_uncompressed(Message::text(long.clone()))
        .await
        .unwrap();
    ws.feed_uncompressed(Message::binary(long.clone().into_bytes()))
        .await
        .unwrap();
    ws.feed(Message::binary(long.clone().into_bytes()))
        .await
        .unwrap();
    ws.flush().await.unwrap();
    ws.send(Message::Ping("p".into())).await.unwrap();
    let frames = wire_frames(&mut peer, 7).await;
    assert_eq!(frames[0], (false, 99));
    assert!(frames[1].0 && frames[1].1 < 100, "{:?}", frames[1]);
    assert!(frames[2].0 && frames[2].1 < 5000 / 2, "{:?}", frames[2]);
    assert_eq!(frames[3], (false, 5000));
    assert_eq!(frames[4], (false, 5000));
    assert!(frames[5].0 && frames[5].1 < 5000 / 2, "{:?}", frames[5]);
    assert_eq!(frames[6], (false, 1), "control frames are never compressed");

    // The split sender has the opt-out too.
    let (ws, mut peer) = raw_server(DeflateParams::default(), DeflateConfig::default());
    let (mut tx, _rx) = ws.split();
    tx.send_uncompressed(Message::binary(vec![7; 300]))
        .await
        .unwrap();
    tx.send(Message::binary(vec![7; 300])).await.unwrap();
    let frames = wire_frames(&mut peer, 2).await;
    assert_eq!(frames[0], (false, 300));
    assert!(frames[1].0 && frames[1].1 < 20, "{:?}", frames[1]);
}

/// Total compressed bytes for `n` similar messages, and the messages as a
/// wavesock client read them.
async fn stream_of_updates(params: DeflateParams, n: usize) -> usize {
    let (mut server, mut peer) =
        raw_server(params, DeflateConfig::default().compression_threshold(0));
    let (a, b) = tokio::io::duplex(1 << 20);
    let mut client = WebSocketStream::from_raw_socket(a, Role::Client, Config::default())
        .unwrap()
        .with_deflate(params, &DeflateConfig::default());
    let msgs: Vec<String> = (0..n)
        .map(|i| format!("{{\"type\":\"price\",\"symbol\":\"WAVE\",\"seq\":{i},\"bid\":{}.{:02},\"ask\":{}.{:02}}}", 100 + i % 7, i % 100, 101 + i % 5, (i * 3) % 100))
        .collect();
    let sender = {
        let msgs = msgs.clone();
        tokio::spawn(async move {
            for m in msgs {
                server.feed(Message::text(m)).await.unwrap();
            }
            server.flush().await.unwrap();
            server
        })
    };
    // Forward the raw bytes to the client, counting them.
    let mut relay = b;
    let mut wire = 0;
    let mut buf = BytesMut::new();
    for m in &msgs {
        let (b0, payload) = read_frame(&mut peer, &mut buf).await.unwrap();
        assert_eq!(b0, 0xC1);
        wire += payload.len();
        relay
            .write_all(&support::unmasked(b0, &payload))
            .await
            .unwrap();
        assert_eq!(
            client.next().await.unwrap().unwrap(),
            Message::text(m.as_str())
        );
    }
    drop(sender.await.unwrap());
    wire
}

#[tokio::test]
async fn context_takeover_across_many_messages() {
    let n = 2000;
    let kept = stream_of_updates(DeflateParams::default(), n).await;
    let mut reset = DeflateParams::default();
    reset.server_no_context_takeover = true;
    let reset = stream_of_updates(reset, n).await;
    // Repeated keys cost nearly nothing once the window holds them.
    assert!(kept * 2 < reset, "kept {kept}, reset {reset}");
    assert!(kept / n < 30, "{kept}");
}

#[tokio::test]
async fn a_prepared_broadcast_is_compressed_once_and_read_by_every_client() {
    // Clients with and without context takeover and with two window sizes,
    // each also receiving messages of its own before and after.
    let offers = [
        DeflateConfig::default(),
        DeflateConfig::default().server_no_context_takeover(true),
        DeflateConfig::default().server_max_window_bits(Some(10)),
    ];
    let news = wavesock::PreparedMessage::new(&Message::text(text(20_000, 7))).unwrap();
    let mut pairs = Vec::new();
    for offer in offers {
        let client = Config::default().deflate(offer);
        let (c, s, answer) = pair(client, on()).await;
        assert!(answer.unwrap().starts_with("permessage-deflate"));
        pairs.push((c, s));
    }
    for (_, server) in &mut pairs {
        server.feed(Message::text(text(5_000, 1))).await.unwrap();
        server.feed_prepared(&news).await.unwrap();
        server.feed(Message::text(text(5_000, 2))).await.unwrap();
        server.send_prepared(&news).await.unwrap();
    }
    for (client, _) in &mut pairs {
        for want in [
            text(5_000, 1),
            text(20_000, 7),
            text(5_000, 2),
            text(20_000, 7),
        ] {
            let got = client.next().await.unwrap().unwrap();
            assert_eq!(got.as_text(), Some(want.as_str()));
        }
    }
}
