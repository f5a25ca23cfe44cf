//! The fault injection of `tests/protocol/faults.rs` with a [`Hub`] as the server:
//! the wavesock client over the misbehaving transport of
//! `tests/support/faulty.rs`, the hub over the other end of the pipe
//! (wrapped in the same faults) through `HubHandle::accept`, with and
//! without permessage-deflate.
//!
//! - Every message is delivered whole, once, in order, and echoed back; a
//!   clean close goes through; no spinning (a run of transport calls that
//!   move no byte stays short).
//! - When the transport breaks at a seeded byte, in either direction, what
//!   arrived on either side is an uncorrupted prefix of what was sent, and
//!   a side that saw no error and completed the closing handshake got
//!   everything.
//! - A protocol violation sent through the faults still gets its close
//!   code back, and the handler is told why.
//! - `Handler::close` is called exactly once for each opened connection,
//!   and the hub lets go of the transport when the connection ends.
//!
//! `FAULT_SEEDS=N` runs N seeds per configuration (default 6).
//!
//! [`Hub`]: wavesock::hub::Hub

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wavesock::hub::HubConfig;
use wavesock::{Config, Message};

use crate::support::faulty;
use crate::support::hub;

use faulty::{Break, Counts, Faulty, Rng, client_frame, messages};
use hub::{TestHub, Tracked};

/// How long one exchange may take before it counts as stuck: a stall
/// detector, not a speed limit (a seed over a one-byte pipe is CPU-bound,
/// and a loaded machine slows it several times over).
const STUCK: Duration = Duration::from_secs(120);

fn seeds() -> u64 {
    std::env::var("FAULT_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6)
}

fn with_deflate(config: Config, deflate: bool) -> Config {
    #[cfg(feature = "deflate")]
    if deflate {
        return config.deflate(wavesock::DeflateConfig::default().compression_threshold(0));
    }
    let _ = deflate;
    config
}

fn client_config(deflate: bool) -> Config {
    // A small write buffer, so the client's backpressure is exercised too.
    with_deflate(Config::default().max_backpressure(4096), deflate)
}

fn hub_config(deflate: bool) -> HubConfig {
    crate::support::hub::defaults().config(with_deflate(
        Config::default().close_timeout(Duration::from_millis(500)),
        deflate,
    ))
}

/// The pipe between client and hub (down to one byte), and the messages
/// for it: through a one-byte pipe, every byte is a round of wake-ups, so
/// there the large messages are cut to 4 KiB to keep the run short.
fn pipe_and_messages(seed: u64, rng: &mut Rng) -> (usize, Vec<Message>) {
    let pipe = 1 + (seed as usize % 5) * 1024;
    let mut sent = messages(rng);
    if pipe == 1 {
        for msg in &mut sent {
            *msg = match &*msg {
                Message::Text(t) => Message::text(t.chars().take(1024).collect::<String>()),
                Message::Binary(b) => Message::binary(b[..b.len().min(4096)].to_vec()),
                other => other.clone(),
            };
        }
    }
    (pipe, sent)
}

/// Waits for the hub to drop the transport `dropped` tracks.
async fn hub_lets_go(dropped: tokio::sync::oneshot::Receiver<()>, what: &str) {
    tokio::time::timeout(Duration::from_secs(10), dropped)
        .await
        .unwrap_or_else(|_| panic!("{what}: the hub still holds the connection"))
        .expect("dropped, not forgotten");
}

/// One exchange: the client sends its messages from one task and reads
/// the echoes in another, then closes; the hub echoes.
async fn exchange(seed: u64, deflate: bool) {
    let (pipe, sent) = pipe_and_messages(seed, &mut Rng::new(seed));
    let (a, b) = tokio::io::duplex(pipe);
    let counts = Arc::new(Counts::default());
    let client_io = Faulty::new(a, seed, counts.clone());
    let (server_io, dropped) = Tracked::new(Faulty::new(b, seed ^ 0xABCD, counts.clone()));

    let hub = TestHub::start(hub_config(deflate)).await;
    hub.handle.accept(server_io).await.unwrap();

    let (ws, response) =
        wavesock::client_async_with_config("ws://faulty/", client_io, client_config(deflate))
            .await
            .expect("client handshake");
    let negotiated = response
        .headers()
        .get("sec-websocket-extensions")
        .is_some_and(|v| v.to_str().unwrap().contains("permessage-deflate"));
    assert_eq!(negotiated, deflate, "seed {seed}: compression negotiated");
    let expected = sent.clone();
    let rx = faulty::echo_and_close(ws, sent, seed).await;
    assert!(rx.is_close_received(), "seed {seed}: the hub's close came");
    drop(rx);
    hub_lets_go(dropped, &format!("seed {seed}")).await;

    let log = hub.stop().await;
    assert_eq!(log.opened.len(), 1, "seed {seed}");
    let ended = &log.ended[0];
    assert!(
        ended.closed.error.is_none(),
        "seed {seed}: a clean close, not {:?}",
        ended.closed.error
    );
    assert!(
        ended.closed.frame.is_some(),
        "seed {seed}: the client's close"
    );
    assert_eq!(ended.seen.received.len(), expected.len(), "seed {seed}");
    for (i, (g, e)) in ended.seen.received.iter().zip(&expected).enumerate() {
        assert!(g == e, "seed {seed}: message {i} differs at the hub");
    }

    let longest = counts.longest_idle.load(Ordering::Relaxed);
    assert!(
        longest <= 200,
        "seed {seed}: {longest} transport calls in a row without progress"
    );
}

async fn run_all(deflate: bool) {
    for seed in 0..seeds() {
        tokio::time::timeout(STUCK, exchange(seed, deflate))
            .await
            .unwrap_or_else(|_| panic!("seed {seed}: stuck (deflate={deflate})"));
    }
}

#[tokio::test]
async fn hub_delivers_everything_through_faults() {
    run_all(false).await;
}

#[cfg(feature = "deflate")]
#[tokio::test]
async fn compressed_hub_exchange_delivers_everything_through_faults() {
    run_all(true).await;
}

/// What one side of a broken exchange saw.
#[derive(Debug, Default)]
struct Seen {
    received: Vec<Message>,
    error: bool,
    close_received: bool,
}

/// The client's and the hub's view of an exchange over a transport that
/// breaks at a seeded byte, in a seeded direction and way.
async fn broken_exchange(seed: u64, deflate: bool) {
    let mut rng = Rng::new(seed ^ 0x5EED);
    let (pipe, sent) = pipe_and_messages(seed, &mut rng);
    let (a, b) = tokio::io::duplex(pipe);
    let counts = Arc::new(Counts::default());
    let mut client_io = Faulty::new(a, seed, counts.clone());
    let mut server_io = Faulty::new(b, seed ^ 0xABCD, counts.clone());
    let at = rng.below(120_000) as usize;
    let how = if rng.below(2) == 0 {
        Break::Eof
    } else {
        Break::Reset
    };
    let case = rng.below(4);
    let broken = match case {
        0 => &mut client_io.read_left,
        1 => &mut client_io.write_left,
        2 => &mut server_io.read_left,
        _ => &mut server_io.write_left,
    };
    *broken = Some((at, how));
    let what = format!(
        "seed {seed}: the {} breaks ({how:?}) at byte {at}, deflate {deflate}",
        [
            "client's reads",
            "client's writes",
            "hub's reads",
            "hub's writes"
        ][case as usize]
    );
    eprintln!("{what}");

    let hub = TestHub::start(hub_config(deflate)).await;
    let (server_io, dropped) = Tracked::new(server_io);
    hub.handle.accept(server_io).await.unwrap();

    let config = client_config(deflate).close_timeout(Duration::from_millis(500));
    let mut seen = Seen::default();
    let mut accepted = 0;
    match wavesock::client_async_with_config("ws://faulty/", client_io, config).await {
        Err(_) => seen.error = true,
        Ok((ws, _)) => {
            let (mut tx, mut rx) = ws.split();
            let to_send = sent.clone();
            let sender = tokio::spawn(async move {
                let mut accepted = 0;
                for msg in to_send {
                    if tx.send(msg).await.is_err() {
                        return (accepted, true);
                    }
                    accepted += 1;
                }
                let failed = futures_util::SinkExt::close(&mut tx).await.is_err();
                (accepted, failed)
            });
            while let Some(msg) = rx.next().await {
                match msg {
                    Ok(msg) if msg.is_data() => seen.received.push(msg),
                    Ok(_) => {}
                    Err(_) => {
                        seen.error = true;
                        break;
                    }
                }
            }
            seen.close_received = rx.is_close_received();
            let (n, failed) = sender.await.expect("sender task");
            accepted = n;
            seen.error |= failed;
        }
    }
    // The client's end is gone: the hub must notice and let go.
    hub_lets_go(dropped, &what).await;
    let log = hub.stop().await;
    assert!(log.opened.len() <= 1, "{what}");
    // Ended exactly once if opened (checked by `stop`); what it saw:
    let hub_seen = match log.ended.first() {
        Some(e) => Seen {
            received: e.seen.received.clone(),
            error: e.closed.error.is_some(),
            close_received: e.closed.frame.is_some(),
        },
        None => Seen {
            error: true,
            ..Seen::default()
        },
    };

    let prefix = |got: &[Message], of: &[Message], who: &str| {
        assert!(got.len() <= of.len(), "{what}: {who} got more than sent");
        for (i, (g, e)) in got.iter().zip(of).enumerate() {
            assert!(g == e, "{what}: {who}'s message {i} differs");
        }
    };
    prefix(
        &hub_seen.received,
        &sent[..accepted.max(hub_seen.received.len())],
        "the hub",
    );
    prefix(&seen.received, &hub_seen.received, "the client");
    if !seen.error && seen.close_received {
        assert_eq!(accepted, sent.len(), "{what}");
        assert_eq!(
            hub_seen.received.len(),
            sent.len(),
            "{what}: lost on the way"
        );
        assert_eq!(seen.received.len(), sent.len(), "{what}: echoes lost");
    }
    // The hub's view: a clean end means it had the client's close, and
    // then every message the client sent before it.
    if !hub_seen.error && hub_seen.close_received {
        assert_eq!(
            hub_seen.received.len(),
            accepted,
            "{what}: the hub lost some"
        );
    }
    let longest = counts.longest_idle.load(Ordering::Relaxed);
    assert!(
        longest <= 200,
        "{what}: {longest} transport calls in a row without progress"
    );
}

#[tokio::test]
async fn a_broken_transport_loses_nothing_silently() {
    let first: u64 = std::env::var("FAULT_FIRST")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    for seed in first..4 * seeds() {
        let deflate = cfg!(feature = "deflate") && seed % 2 == 1;
        tokio::time::timeout(STUCK, broken_exchange(seed, deflate))
            .await
            .unwrap_or_else(|_| panic!("seed {seed}: stuck after the transport broke"));
    }
}

#[tokio::test]
async fn protocol_errors_through_faults_still_get_their_close_code() {
    let cases: [(&str, Vec<u8>, u16); 4] = [
        ("an unmasked frame", vec![0x81, 0x02, b'h', b'i'], 1002),
        ("reserved bits", client_frame(0xC1, b"x", None), 1002),
        (
            "invalid UTF-8",
            client_frame(0x81, &[0xC3, 0x28, 0xFF], None),
            1007,
        ),
        (
            "a frame over the limit",
            client_frame(0x82, &[0; 16], Some(1 << 20)),
            1009,
        ),
    ];
    for seed in 0..seeds() {
        let config =
            crate::support::hub::defaults().config(Config::default().max_message_size(64 << 10));
        let hub = TestHub::start(config).await;
        for (i, (what, wire, code)) in cases.iter().enumerate() {
            let (a, mut peer) = tokio::io::duplex(64);
            let counts = Arc::new(Counts::default());
            let (io, dropped) = Tracked::new(Faulty::new(a, seed, counts.clone()));
            hub.handle.accept(io).await.unwrap();
            let mut bytes = b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n".to_vec();
            bytes.extend_from_slice(wire);
            let peer_task = tokio::spawn(async move {
                let _ = peer.write_all(&bytes).await;
                let mut back = Vec::new();
                let _ = peer.read_to_end(&mut back).await;
                back
            });
            let back = tokio::time::timeout(Duration::from_secs(10), peer_task)
                .await
                .unwrap_or_else(|_| panic!("seed {seed}, {what}: stuck"))
                .unwrap();
            let head_end = back
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .unwrap_or_else(|| panic!("seed {seed}, {what}: no response: {back:?}"))
                + 4;
            assert!(back.starts_with(b"HTTP/1.1 101 "), "seed {seed}, {what}");
            let frame = &back[head_end..];
            // Only the close frame follows: 0x88, length, code, reason.
            assert!(frame.len() >= 4, "seed {seed}, {what}: {frame:?}");
            assert_eq!(frame[0], 0x88, "seed {seed}, {what}: {frame:?}");
            assert_eq!(frame.len(), 2 + frame[1] as usize, "seed {seed}, {what}");
            assert_eq!(
                u16::from_be_bytes([frame[2], frame[3]]),
                *code,
                "seed {seed}, {what}"
            );
            hub_lets_go(dropped, what).await;
            hub.wait_ended(i + 1, Duration::from_secs(5)).await;
            let log = hub.log();
            let ended = &log.ended[i];
            let err = ended.closed.error.as_ref().expect("a violation");
            assert_eq!(
                err.close_code().map(|c| c.0),
                Some(*code),
                "seed {seed}, {what}: {err}"
            );
            assert!(ended.seen.received.is_empty(), "seed {seed}, {what}");
            let longest = counts.longest_idle.load(Ordering::Relaxed);
            assert!(longest <= 200, "seed {seed}, {what}: {longest} idle calls");
        }
        let log = hub.stop().await;
        assert_eq!(log.opened.len(), cases.len(), "seed {seed}");
    }
}
